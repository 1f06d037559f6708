//! Kernel modules ppscope hooks (gve), followed as they load, unload and reload.
use std::collections::HashMap;

use super::hooks::HOOKS;

/// One load of a module: unloading and loading it again, even between two calls and at the
/// same address, gives another (sysfs recreates `/sys/module/NAME` with a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ModuleGeneration {
    base: u64,
    sysfs_inode: u64,
}

pub(super) fn module_generation(module: &str, base: u64) -> ModuleGeneration {
    use std::os::unix::fs::MetadataExt;
    ModuleGeneration {
        base,
        sysfs_inode: std::fs::metadata(format!("/sys/module/{module}/initstate"))
            .map_or(0, |m| m.ino()),
    }
}

/// Modules named by the hook table, once each.
pub(super) fn hooked_modules() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    for m in HOOKS.iter().filter_map(|d| d.module) {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    seen.into_iter()
}

/// Live modules and their base addresses, from /proc/modules ("gve 135168 0 - Live
/// 0xffffffffc0a00000"; the address reads 0 without CAP_SYSLOG, which still tells loaded
/// from not loaded).
pub(super) fn loaded_modules() -> HashMap<String, u64> {
    let text = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    parse_modules(&text)
}

pub(super) fn parse_modules(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // A module still loading or going away has no usable symbols yet (or any more).
            if f.len() < 6 || f[4] != "Live" {
                return None;
            }
            let addr = u64::from_str_radix(f[5].trim_start_matches("0x"), 16).unwrap_or(0);
            Some((f[0].to_string(), addr))
        })
        .collect()
}
