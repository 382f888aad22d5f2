//! The `Table` trait and the `table!` macro that defines a trace table once: its row
//! struct, its Arrow schema and the conversions between rows and record batches all
//! come from one list of columns, so they cannot drift apart.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};

use crate::column::ValueError;

/// A value error with the column it happened in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnError {
    pub column: &'static str,
    pub row: usize,
    pub message: String,
}

/// One of the trace tables (`requests`, `chunks`, `metrics`, `events`).
pub trait Table {
    /// One row of the table.
    type Row: Clone + std::fmt::Debug + PartialEq;
    /// The table's name; its file is `<NAME>.parquet`.
    const NAME: &'static str;
    /// How many of the last columns were added to format v1 after it first shipped:
    /// files written before them lack them, and readers give nulls in their place.
    const ADDED_COLUMNS: usize = 0;
    /// The columns in file order.
    fn fields() -> Vec<Field>;
    /// The Arrow schema (no metadata: versioning lives in the Parquet key-value metadata).
    fn schema() -> SchemaRef {
        std::sync::Arc::new(Schema::new(Self::fields()))
    }
    /// Column names in file order.
    fn column_names() -> Vec<String> {
        Self::fields().iter().map(|f| f.name().clone()).collect()
    }
    /// Puts a block of rows in storage order before it becomes a batch (default: as given).
    /// Tables may group rows (e.g. by request) so that columns compress better; readers
    /// must not rely on row order beyond what FORMAT.md states.
    fn sort_block(_rows: &mut [Self::Row]) {}
    /// Builds one record batch from rows.
    fn to_batch(rows: &[Self::Row]) -> Result<RecordBatch, ArrowError>;
    /// Reads the rows of a batch whose schema was checked to be [`Table::schema`].
    fn from_batch(batch: &RecordBatch) -> Result<Vec<Self::Row>, ColumnError>;
}

/// Defines a table (exported: other crates define their own tables, e.g. the simulator's
/// ground truth, and write them with [`crate::writer::TableWriter`]): `table!(Marker, Row, "name" [, order = fn] { /// doc \n column: Type, ... })`;
/// `order` is a comparison that [`Table::sort_block`] applies to each block of rows;
/// `added = N` says the last N columns (all nullable) came after format v1 first shipped.
#[macro_export]
macro_rules! table {
    (
        $(#[$tmeta:meta])*
        $table:ident, $(#[$rmeta:meta])* $row:ident, $name:literal $(, order = $order:path)? $(, added = $added:literal)? {
            $( $(#[doc = $doc:literal])* $field:ident : $ty:ty ),+ $(,)?
        }
    ) => {
        $(#[$rmeta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $row { $( $(#[doc = $doc])* pub $field: $ty, )+ }

        $(#[$tmeta])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $table;

        impl $crate::table::Table for $table {
            type Row = $row;
            const NAME: &'static str = $name;
            $( const ADDED_COLUMNS: usize = $added; )?

            $( fn sort_block(rows: &mut [$row]) { rows.sort_by($order); } )?

            fn fields() -> Vec<$crate::arrow_schema::Field> {
                vec![$($crate::arrow_schema::Field::new(
                    stringify!($field),
                    <$ty as $crate::column::Column>::DATA_TYPE,
                    <$ty as $crate::column::Column>::NULLABLE,
                )),+]
            }

            fn to_batch(rows: &[$row]) -> Result<$crate::arrow_array::RecordBatch, $crate::arrow_schema::ArrowError> {
                let columns = vec![$(
                    <$ty as $crate::column::Column>::to_array(rows.iter().map(|r| &r.$field))
                ),+];
                $crate::arrow_array::RecordBatch::try_new(<Self as $crate::table::Table>::schema(), columns)
            }

            fn from_batch(batch: &$crate::arrow_array::RecordBatch) -> Result<Vec<$row>, $crate::table::ColumnError> {
                let n = batch.num_rows();
                $(
                    let mut $field = {
                        let name = stringify!($field);
                        let array = batch.column_by_name(name).ok_or_else(|| $crate::table::ColumnError {
                            column: name,
                            row: 0,
                            message: "column missing".to_string(),
                        })?;
                        <$ty as $crate::column::Column>::from_array(array.as_ref())
                            .map_err(|e| $crate::table::ColumnError::at(name, e))?
                            .into_iter()
                    };
                )+
                let mut out = Vec::with_capacity(n);
                for row in 0..n {
                    out.push($row {
                        $( $field: $field.next().ok_or_else(|| $crate::table::ColumnError {
                            column: stringify!($field),
                            row,
                            message: "column shorter than the batch".to_string(),
                        })?, )+
                    });
                }
                Ok(out)
            }
        }
    };
}

impl ColumnError {
    #[doc(hidden)]
    pub fn at(column: &'static str, e: ValueError) -> Self {
        ColumnError {
            column,
            row: e.row,
            message: e.message,
        }
    }
}
