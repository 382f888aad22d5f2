//! The recording host's facts, read from the files Linux keeps them in: the OS
//! (`/etc/os-release`), the kernel, the CPU model and count (`/proc/cpuinfo`) and the
//! memory (`/proc/meminfo`). A file that is missing or says nothing gives no fact.

use tokentrace_schemas::manifest::Fact;

/// `PRETTY_NAME` of an os-release file (quotes removed).
pub fn os_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        let v = l.strip_prefix("PRETTY_NAME=")?.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The CPU model and the number of logical CPUs from `/proc/cpuinfo` (x86's
/// `model name`; Arm's `CPU part`-only files give just the count).
pub fn cpu(cpuinfo: &str) -> (Option<String>, usize) {
    let mut model = None;
    let mut count = 0;
    for l in cpuinfo.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        match k.trim() {
            "processor" => count += 1,
            "model name" | "Model" if model.is_none() => {
                let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
                if !v.is_empty() {
                    model = Some(v);
                }
            }
            _ => {}
        }
    }
    (model, count)
}

/// `MemTotal` of `/proc/meminfo`, bytes.
pub fn memory_bytes(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let v = l.strip_prefix("MemTotal:")?.trim();
        let kb: u64 = v.strip_suffix("kB").unwrap_or(v).trim().parse().ok()?;
        kb.checked_mul(1024)
    })
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The facts of the host this process runs on.
pub fn facts() -> Vec<Fact> {
    let mut out = Vec::new();
    for path in ["/etc/os-release", "/usr/lib/os-release"] {
        if let Some(v) = read(path).as_deref().and_then(os_name) {
            out.push(Fact::new("host.os", v, path));
            break;
        }
    }
    if let Some(v) = read("/proc/sys/kernel/osrelease") {
        let v = v.trim();
        if !v.is_empty() {
            out.push(Fact::new("host.kernel", v, "/proc/sys/kernel/osrelease"));
        }
    }
    if let Some(text) = read("/proc/cpuinfo") {
        let (model, count) = cpu(&text);
        if let Some(m) = model {
            out.push(Fact::new("host.cpu", m, "/proc/cpuinfo"));
        }
        if count > 0 {
            out.push(Fact::new("host.cpus", count.to_string(), "/proc/cpuinfo"));
        }
    }
    if let Some(b) = read("/proc/meminfo").as_deref().and_then(memory_bytes) {
        out.push(Fact::new(
            "host.memory",
            crate::observe::gpu::gib(b),
            "/proc/meminfo",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_linux_writes() {
        let os = "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n";
        assert_eq!(os_name(os).as_deref(), Some("Ubuntu 24.04.1 LTS"));
        assert_eq!(os_name("PRETTY_NAME=Debian"), Some("Debian".to_string()));
        assert_eq!(os_name("NAME=x\n"), None);
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC  9654 96-Core Processor\n\n\
                       processor\t: 1\nmodel name\t: AMD EPYC  9654 96-Core Processor\n";
        assert_eq!(
            cpu(cpuinfo),
            (Some("AMD EPYC 9654 96-Core Processor".to_string()), 2)
        );
        assert_eq!(cpu("garbage\n"), (None, 0));
        assert_eq!(
            memory_bytes("MemTotal:       24578900 kB\nMemFree: 1 kB\n"),
            Some(24_578_900 * 1024)
        );
        assert_eq!(memory_bytes("MemTotal: lots\n"), None);
    }

    /// On Linux, this host has at least a kernel and a CPU count.
    #[test]
    fn this_host_has_facts() {
        let f = facts();
        if std::path::Path::new("/proc/cpuinfo").exists() {
            assert!(f.iter().any(|f| f.key == "host.cpus"), "{f:?}");
            assert!(f.iter().any(|f| f.key == "host.kernel"), "{f:?}");
        }
    }
}
