//! How a Rust field maps to an Arrow column and back: one small trait implemented for
//! the handful of value types the trace tables use, and a macro for string enums.
//! Reading is strict: a null in a required column or an unknown enum value is an error.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Float64Array, Int32Array, Int64Array, StringArray};
use arrow_schema::DataType;

/// A value that cannot be read from a column: its row within the array and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    pub row: usize,
    pub message: String,
}

/// A Rust type stored as one Arrow column.
pub trait Column: Sized {
    /// The Arrow type of the column.
    const DATA_TYPE: DataType;
    /// Whether the column may hold nulls (`Option<_>` types).
    const NULLABLE: bool;
    /// Builds the column from the values in row order.
    fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef
    where
        Self: 'a;
    /// Reads the column back; the array's type was checked against the schema before.
    fn from_array(array: &dyn Array) -> Result<Vec<Self>, ValueError>;
}

fn downcast<'a, A: 'static>(array: &'a dyn Array, ty: &str) -> Result<&'a A, ValueError> {
    array
        .as_any()
        .downcast_ref::<A>()
        .ok_or_else(|| ValueError {
            row: 0,
            message: format!("expected a {ty} array, found {}", array.data_type()),
        })
}

fn null_at(row: usize) -> ValueError {
    ValueError {
        row,
        message: "null in a required column".to_string(),
    }
}

macro_rules! primitive_column {
    ($t:ty, $arr:ty, $dt:expr) => {
        impl Column for $t {
            const DATA_TYPE: DataType = $dt;
            const NULLABLE: bool = false;
            fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
                Arc::new(<$arr>::from_iter_values(values.copied()))
            }
            fn from_array(array: &dyn Array) -> Result<Vec<Self>, ValueError> {
                let a = downcast::<$arr>(array, stringify!($t))?;
                (0..a.len())
                    .map(|i| {
                        if a.is_null(i) {
                            Err(null_at(i))
                        } else {
                            Ok(a.value(i))
                        }
                    })
                    .collect()
            }
        }
        impl Column for Option<$t> {
            const DATA_TYPE: DataType = $dt;
            const NULLABLE: bool = true;
            fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
                Arc::new(<$arr>::from_iter(values.copied()))
            }
            fn from_array(array: &dyn Array) -> Result<Vec<Self>, ValueError> {
                Ok(downcast::<$arr>(array, stringify!($t))?.iter().collect())
            }
        }
    };
}

primitive_column!(i64, Int64Array, DataType::Int64);
primitive_column!(i32, Int32Array, DataType::Int32);
primitive_column!(f64, Float64Array, DataType::Float64);

impl Column for String {
    const DATA_TYPE: DataType = DataType::Utf8;
    const NULLABLE: bool = false;
    fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(values))
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>, ValueError> {
        let a = downcast::<StringArray>(array, "string")?;
        (0..a.len())
            .map(|i| {
                if a.is_null(i) {
                    Err(null_at(i))
                } else {
                    Ok(a.value(i).to_string())
                }
            })
            .collect()
    }
}

impl Column for Option<String> {
    const DATA_TYPE: DataType = DataType::Utf8;
    const NULLABLE: bool = true;
    fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
        Arc::new(StringArray::from_iter(values.map(|v| v.as_deref())))
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>, ValueError> {
        Ok(downcast::<StringArray>(array, "string")?
            .iter()
            .map(|v| v.map(str::to_string))
            .collect())
    }
}

/// A closed set of string values, stored as a Utf8 column (Parquet dictionary-encodes it).
pub trait StrEnum: Sized + Copy + 'static {
    /// Every value, in documentation order.
    const ALL: &'static [Self];
    /// The value as stored.
    fn as_str(self) -> &'static str;
    /// Parses a stored value.
    fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_str() == s)
    }
}

/// Declares a [`StrEnum`] with its stored spellings and implements [`Column`] for it
/// (required) and for `Option` of it (nullable).
#[macro_export]
macro_rules! str_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[doc = $doc:literal])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $(#[doc = $doc])* $variant ),+ }

        impl $crate::column::StrEnum for $name {
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::column::StrEnum::as_str(*self))
            }
        }

        impl $crate::serde::Serialize for $name {
            fn serialize<S: $crate::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($crate::column::StrEnum::as_str(*self))
            }
        }

        impl<'de> $crate::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as $crate::serde::Deserialize>::deserialize(d)?;
                <Self as $crate::column::StrEnum>::parse(&s).ok_or_else(|| {
                    $crate::serde::de::Error::custom(format!(
                        "unknown {} `{}` (expected one of: {})",
                        stringify!($name),
                        s,
                        $crate::column::enum_values::<Self>()
                    ))
                })
            }
        }

        impl $crate::column::Column for $name {
            const DATA_TYPE: $crate::arrow_schema::DataType = $crate::arrow_schema::DataType::Utf8;
            const NULLABLE: bool = false;
            fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> $crate::arrow_array::ArrayRef {
                $crate::column::enum_to_array(values.map(|v| Some(*v)))
            }
            fn from_array(array: &dyn $crate::arrow_array::Array) -> Result<Vec<Self>, $crate::column::ValueError> {
                $crate::column::enum_from_array::<Self>(array)?
                    .into_iter()
                    .enumerate()
                    .map(|(row, v)| v.ok_or_else(|| $crate::column::ValueError {
                        row,
                        message: "null in a required column".to_string(),
                    }))
                    .collect()
            }
        }

        impl $crate::column::Column for Option<$name> {
            const DATA_TYPE: $crate::arrow_schema::DataType = $crate::arrow_schema::DataType::Utf8;
            const NULLABLE: bool = true;
            fn to_array<'a>(values: impl Iterator<Item = &'a Self>) -> $crate::arrow_array::ArrayRef {
                $crate::column::enum_to_array(values.copied())
            }
            fn from_array(array: &dyn $crate::arrow_array::Array) -> Result<Vec<Self>, $crate::column::ValueError> {
                $crate::column::enum_from_array::<$name>(array)
            }
        }
    };
}

/// The stored spellings of an enum, comma-separated (for error messages).
pub fn enum_values<E: StrEnum>() -> String {
    E::ALL
        .iter()
        .map(|v| v.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses a command-line value of a [`StrEnum`] (a clap `value_parser`), naming the
/// values it takes when it is none of them.
pub fn parse_arg<E: StrEnum>(s: &str) -> Result<E, String> {
    E::parse(s.trim()).ok_or_else(|| format!("`{s}`: expected one of {}", enum_values::<E>()))
}

#[doc(hidden)]
pub fn enum_to_array<E: StrEnum>(values: impl Iterator<Item = Option<E>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(values.map(|v| v.map(E::as_str))))
}

#[doc(hidden)]
pub fn enum_from_array<E: StrEnum>(array: &dyn Array) -> Result<Vec<Option<E>>, ValueError> {
    let a = downcast::<StringArray>(array, "string")?;
    a.iter()
        .enumerate()
        .map(|(row, v)| match v {
            None => Ok(None),
            Some(s) => E::parse(s).map(Some).ok_or_else(|| ValueError {
                row,
                message: format!(
                    "unknown value `{s}` (expected one of: {})",
                    enum_values::<E>()
                ),
            }),
        })
        .collect()
}
