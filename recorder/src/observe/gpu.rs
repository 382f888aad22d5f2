//! GPU facts and telemetry behind one trait: NVML (`libnvidia-ml`, which the
//! `nvml-wrapper` crate loads at run time, so the recorder builds and runs on machines
//! without NVIDIA drivers), or a simulated box for tests and the built-in simulator.

use std::sync::Mutex;

use tokentrace_schemas::manifest::Fact;
use tokentrace_schemas::tables::GpuRow;

/// Where the GPU facts and samples come from.
pub trait GpuSource: Send + Sync + std::fmt::Debug {
    /// The GPUs' static facts (`gpu.name`, `gpu.count`, `gpu.memory`, `gpu.driver`,
    /// `gpu.cuda`), each with its source.
    fn facts(&self) -> Vec<Fact>;
    /// One row per GPU, read now and stamped `at` (run-clock ns). A value the source
    /// cannot give is null; a GPU that cannot be read at all is left out.
    fn sample(&self, at: i64) -> Vec<GpuRow>;
    /// The requests the server reported running at the last scrape (a simulated box
    /// draws power by it; real GPUs ignore it).
    fn server_running(&self, _running: f64) {}
}

/// "141 GiB" (binary units, one decimal below 10).
pub fn gib(bytes: u64) -> String {
    let g = bytes as f64 / f64::from(1u32 << 30);
    if g < 10.0 {
        format!("{g:.1} GiB")
    } else {
        format!("{g:.0} GiB")
    }
}

/// "4× NVIDIA H200" style facts from per-GPU names and memory sizes: the count, the
/// name (every distinct name, joined by " + "), and the memory of one GPU (or each
/// distinct size).
fn device_facts(names: &[String], memory: &[u64], source: &str) -> Vec<Fact> {
    let distinct = |v: Vec<String>| {
        let mut out: Vec<String> = Vec::new();
        for s in v {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out.join(" + ")
    };
    let mut facts = vec![Fact::new("gpu.count", names.len().to_string(), source)];
    if !names.is_empty() {
        facts.push(Fact::new("gpu.name", distinct(names.to_vec()), source));
    }
    if !memory.is_empty() {
        let each = distinct(memory.iter().map(|b| gib(*b)).collect());
        facts.push(Fact::new("gpu.memory", format!("{each} each"), source));
    }
    facts
}

/// The NVIDIA GPUs of this host, through NVML.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

impl Nvml {
    /// Loads NVML; the error says why not (no library, no driver, no permission).
    pub fn load() -> Result<Self, String> {
        nvml_wrapper::Nvml::init()
            .map(|nvml| Nvml { nvml })
            .map_err(|e| format!("NVML: {e}"))
    }
}

impl GpuSource for Nvml {
    fn facts(&self) -> Vec<Fact> {
        let n = self.nvml.device_count().unwrap_or(0);
        let (mut names, mut memory) = (Vec::new(), Vec::new());
        for i in 0..n {
            if let Ok(d) = self.nvml.device_by_index(i) {
                if let Ok(name) = d.name() {
                    names.push(name);
                }
                if let Ok(m) = d.memory_info() {
                    memory.push(m.total);
                }
            }
        }
        let mut facts = device_facts(&names, &memory, "NVML");
        if let Ok(v) = self.nvml.sys_driver_version() {
            facts.push(Fact::new("gpu.driver", v, "NVML"));
        }
        if let Ok(v) = self.nvml.sys_cuda_driver_version() {
            facts.push(Fact::new(
                "gpu.cuda",
                format!(
                    "{}.{}",
                    nvml_wrapper::cuda_driver_version_major(v),
                    nvml_wrapper::cuda_driver_version_minor(v)
                ),
                "NVML",
            ));
        }
        facts
    }

    fn sample(&self, at: i64) -> Vec<GpuRow> {
        use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
        let n = self.nvml.device_count().unwrap_or(0);
        let mut rows = Vec::new();
        for i in 0..n {
            let Ok(d) = self.nvml.device_by_index(i) else {
                continue;
            };
            rows.push(GpuRow {
                sample_ns: at,
                gpu: i32::try_from(i).unwrap_or(i32::MAX),
                uuid: d.uuid().ok(),
                utilization_pct: d.utilization_rates().ok().map(|u| f64::from(u.gpu)),
                memory_used_bytes: d
                    .memory_info()
                    .ok()
                    .and_then(|m| i64::try_from(m.used).ok()),
                power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
                energy_mj: d
                    .total_energy_consumption()
                    .ok()
                    .and_then(|e| i64::try_from(e).ok()),
                sm_clock_mhz: d
                    .clock_info(Clock::SM)
                    .ok()
                    .and_then(|c| i32::try_from(c).ok()),
                temperature_c: d
                    .temperature(TemperatureSensor::Gpu)
                    .ok()
                    .and_then(|t| i32::try_from(t).ok()),
                throttle_reasons: d
                    .current_throttle_reasons()
                    .ok()
                    .and_then(|r| i64::try_from(r.bits()).ok()),
            });
        }
        rows
    }
}

/// A simulated box: `count` GPUs named `name` with `memory_bytes` each, drawing
/// `busy_w` watts while the server reports requests running and `idle_w` otherwise. Its energy counters integrate that draw between samples,
/// as NVML's do. For tests, and for recordings of the built-in simulator, whose report
/// then names the GPUs "(simulated)".
#[derive(Debug)]
pub struct SimulatedGpus {
    pub count: u32,
    pub name: String,
    pub memory_bytes: u64,
    pub idle_w: f64,
    pub busy_w: f64,
    state: Mutex<SimState>,
}

#[derive(Debug, Default)]
struct SimState {
    busy: bool,
    /// Time of the last sample and the energy counter then, mJ (one per GPU, all equal).
    last: Option<(i64, f64)>,
}

impl SimulatedGpus {
    pub fn new(count: u32, name: &str, memory_bytes: u64, idle_w: f64, busy_w: f64) -> Self {
        SimulatedGpus {
            count,
            name: name.to_string(),
            memory_bytes,
            idle_w,
            busy_w,
            state: Mutex::new(SimState::default()),
        }
    }
}

impl GpuSource for SimulatedGpus {
    fn facts(&self) -> Vec<Fact> {
        let names = vec![format!("{} (simulated)", self.name); self.count as usize];
        let memory = vec![self.memory_bytes; self.count as usize];
        device_facts(&names, &memory, "simulated")
    }

    fn server_running(&self, running: f64) {
        if let Ok(mut s) = self.state.lock() {
            s.busy = running > 0.0;
        }
    }

    fn sample(&self, at: i64) -> Vec<GpuRow> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        let power = if s.busy { self.busy_w } else { self.idle_w };
        let energy = match s.last {
            Some((t, e)) if at > t => e + power * (at - t) as f64 / 1e6,
            Some((_, e)) => e,
            None => 0.0,
        };
        s.last = Some((at, energy));
        (0..self.count)
            .map(|i| GpuRow {
                sample_ns: at,
                gpu: i32::try_from(i).unwrap_or(i32::MAX),
                uuid: Some(format!("GPU-00000000-0000-0000-0000-{i:012}")),
                utilization_pct: Some(if s.busy { 100.0 } else { 0.0 }),
                memory_used_bytes: i64::try_from(self.memory_bytes / 10 * 9).ok(),
                power_w: Some(power),
                energy_mj: Some(energy.round() as i64),
                sm_clock_mhz: Some(1980),
                temperature_c: Some(if s.busy { 65 } else { 35 }),
                throttle_reasons: Some(if s.busy { 0 } else { 1 }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_energy_integrates_the_draw() {
        let g = SimulatedGpus::new(2, "NVIDIA H200", 141 << 30, 100.0, 600.0);
        assert_eq!(g.sample(0)[0].energy_mj, Some(0));
        g.server_running(3.0);
        // 2 s at 600 W: 1,200 J per GPU.
        let rows = g.sample(2_000_000_000);
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.energy_mj == Some(1_200_000)));
        assert_eq!(rows[1].power_w, Some(600.0));
        g.server_running(0.0);
        // Then 1 s idle: 100 J more.
        assert_eq!(g.sample(3_000_000_000)[0].energy_mj, Some(1_300_000));
    }

    #[test]
    fn facts_name_the_box() {
        let g = SimulatedGpus::new(4, "NVIDIA H200", 141 << 30, 100.0, 600.0);
        let facts = g.facts();
        let get = |k: &str| tokentrace_schemas::manifest::fact(&facts, k).map(str::to_string);
        assert_eq!(get("gpu.count").as_deref(), Some("4"));
        assert_eq!(get("gpu.name").as_deref(), Some("NVIDIA H200 (simulated)"));
        assert_eq!(get("gpu.memory").as_deref(), Some("141 GiB each"));
        assert_eq!(gib(80 << 30), "80 GiB");
        assert_eq!(gib(3 << 29), "1.5 GiB");
    }

    /// On a machine without NVIDIA's library, loading NVML fails with a reason (and the
    /// recorder records no telemetry); with one, it names at least the driver.
    #[test]
    fn nvml_loads_or_says_why_not() {
        match Nvml::load() {
            Ok(n) => assert!(n.facts().iter().any(|f| f.key == "gpu.count")),
            Err(e) => assert!(e.starts_with("NVML: "), "{e}"),
        }
    }
}
