//! The VM lab's initramfs, written in Rust as an uncompressed newc cpio archive: busybox,
//! the host's `ip`, `iperf3`, `ethtool` (plus their libraries), ppscope, the decompressed
//! kernel modules, `/init`, and the lab script with its arguments and the helpers it sources
//! (`/lab/lib.sh`).
//!
//! The tree is "usr-merged": `/bin`, `/sbin`, `/lib`, `/lib64` are symlinks into `/usr`.

use super::kernel::Kernel;
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const INIT_SCRIPT: &str = include_str!("../../vm/init.sh");
/// Shell helpers the lab scripts share (`wait_for`, `start_agent`, `scrape`, ...), in every
/// lab's initramfs as `/lab/lib.sh`: a script sources it with `. /lab/lib.sh`, and no caller
/// of [`super::VmRun`] has to add it.
pub const LAB_LIB: &str = include_str!("../../vm-tests/lib.sh");

/// Tools the lab needs from the host (Debian: iproute2, iperf3, ethtool).
pub const REQUIRED_TOOLS: &[&str] = &["ip", "iperf3", "ethtool"];
/// Added when the host has them.
pub const OPTIONAL_TOOLS: &[&str] = &["tc", "ss", "bpftool", "strace", "bash", "setpriv"];
/// The guest's /bin/sh. Not busybox: Debian's busybox-static runs its own applets in
/// preference to PATH (FEATURE_SH_STANDALONE), so `ip` would be busybox's, without netns
/// or XDP support. dash looks commands up in PATH like any shell.
pub const SHELL: &str = "dash";
/// Modules loaded by default (with their dependencies).
pub const DEFAULT_MODULES: &[&str] = &["virtio_net", "veth", "gve"];

#[derive(Debug)]
enum Node {
    Dir,
    File { data: Vec<u8>, mode: u32 },
    Symlink(String),
    CharDev { major: u32, minor: u32 },
}

/// An in-memory file tree, written out as a newc cpio archive.
#[derive(Default, Debug)]
pub struct Archive {
    // Keyed by path components, so that a directory always sorts before its contents.
    nodes: BTreeMap<Vec<String>, Node>,
}

fn key(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}

impl Archive {
    fn insert(&mut self, path: &str, node: Node) {
        let k = key(path);
        for i in 1..k.len() {
            self.nodes.entry(k[..i].to_vec()).or_insert(Node::Dir);
        }
        self.nodes.insert(k, node);
    }
    pub fn dir(&mut self, path: &str) {
        self.insert(path, Node::Dir);
    }
    pub fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) {
        self.insert(path, Node::File { data, mode });
    }
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.insert(path, Node::Symlink(target.to_string()));
    }
    pub fn chardev(&mut self, path: &str, major: u32, minor: u32) {
        self.insert(path, Node::CharDev { major, minor });
    }
    pub fn contains(&self, path: &str) -> bool {
        self.nodes.contains_key(&key(path))
    }
    /// Copy a host file (following symlinks), keeping its permission bits.
    pub fn copy(&mut self, host: &Path, path: &str) -> Result<()> {
        let data = fs::read(host).with_context(|| format!("reading {}", host.display()))?;
        let mode = fs::metadata(host)?.permissions().mode() & 0o7777;
        self.file(path, data, mode);
        Ok(())
    }
    /// Copy a host file or directory tree.
    pub fn copy_tree(&mut self, host: &Path, path: &str) -> Result<()> {
        let meta =
            fs::metadata(host).with_context(|| format!("{} does not exist", host.display()))?;
        if meta.is_dir() {
            self.dir(path);
            for e in fs::read_dir(host)? {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                self.copy_tree(&e.path(), &format!("{}/{name}", path.trim_end_matches('/')))?;
            }
            Ok(())
        } else {
            self.copy(host, path)
        }
    }

    /// Serialise as a newc ("070701") cpio archive.
    pub fn write_to(&self, mut w: impl Write) -> Result<()> {
        for (ino, (k, node)) in (1u32..).zip(&self.nodes) {
            let name = k.join("/");
            let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match node {
                Node::Dir => (0o040755, &[], (0, 0)),
                Node::File { data, mode } => (0o100000 | mode, data, (0, 0)),
                Node::Symlink(t) => (0o120777, t.as_bytes(), (0, 0)),
                Node::CharDev { major, minor } => (0o020600, &[], (*major, *minor)),
            };
            write_entry(&mut w, ino, mode, &name, data, rdev)?;
        }
        write_entry(&mut w, 0, 0, "TRAILER!!!", &[], (0, 0))?;
        Ok(())
    }
}

fn write_entry(
    w: &mut impl Write,
    ino: u32,
    mode: u32,
    name: &str,
    data: &[u8],
    rdev: (u32, u32),
) -> Result<()> {
    let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
    let namesize = name.len() + 1;
    let header = format!(
        "070701{ino:08X}{mode:08X}{:08X}{:08X}{nlink:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{namesize:08X}{:08X}",
        0, 0, 0, data.len(), 0, 0, rdev.0, rdev.1, 0
    );
    w.write_all(header.as_bytes())?;
    w.write_all(name.as_bytes())?;
    w.write_all(&[0])?;
    w.write_all(&vec![0u8; pad4(110 + namesize)])?;
    w.write_all(data)?;
    w.write_all(&vec![0u8; pad4(data.len())])?;
    Ok(())
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Map a host path to the usr-merged guest tree (`/lib/x` → `/usr/lib/x`, etc.).
fn usr_path(p: &str) -> String {
    for top in ["/bin/", "/sbin/", "/lib/", "/lib64/"] {
        if let Some(rest) = p.strip_prefix(top) {
            return format!("/usr{top}{rest}");
        }
    }
    p.to_string()
}

/// Find a program in PATH (plus the sbin directories a non-root PATH may lack).
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs: Vec<&str> = path.split(':').collect();
    let found = dirs
        .into_iter()
        .chain([
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(prog))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        });
    found
}

/// The shared libraries (and the dynamic loader) `ldd` reports for a binary; empty for a
/// static one.
fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("cannot run ldd (Debian package libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if text.contains("not a dynamic executable")
            || String::from_utf8_lossy(&out.stderr).contains("not a dynamic")
        {
            return Ok(Vec::new());
        }
        bail!(
            "ldd {} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.contains("=> not found") {
            bail!("ldd {}: {line}", bin.display());
        }
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

/// Add a dynamically linked host binary at `guest` with its libraries.
pub fn add_binary(ar: &mut Archive, host: &Path, guest: &str) -> Result<()> {
    ar.copy(host, guest)?;
    for lib in shared_libs(host)? {
        let g = usr_path(&lib.to_string_lossy());
        if !ar.contains(&g) {
            ar.copy(&lib, &g)?;
        }
    }
    Ok(())
}

/// One module to load, in order.
#[derive(Debug, Clone)]
pub struct Module {
    pub name: String,
    /// Path relative to `lib/modules/<version>/`, ending in `.ko` (decompressed).
    pub rel: String,
    pub data: Vec<u8>,
}

fn norm(name: &str) -> String {
    name.replace('-', "_")
}

/// Resolve `wanted` modules and their dependencies (from each module's `depends=` modinfo,
/// as Debian ships no modules.dep) into load order, decompressing them. Built-in modules
/// are skipped.
pub fn resolve_modules(kernel: &Kernel, wanted: &[String]) -> Result<Vec<Module>> {
    let mdir = &kernel.modules_dir;
    let mut index: BTreeMap<String, PathBuf> = BTreeMap::new();
    index_modules(mdir, mdir, &mut index)?;
    let builtin: BTreeSet<String> = fs::read_to_string(mdir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .map(|f| norm(f.trim_end_matches(".ko")))
        .collect();
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for w in wanted {
        visit(&norm(w), &index, &builtin, &mut seen, &mut order, kernel, 0)?;
    }
    Ok(order)
}

fn visit(
    name: &str,
    index: &BTreeMap<String, PathBuf>,
    builtin: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<Module>,
    kernel: &Kernel,
    depth: usize,
) -> Result<()> {
    if depth > 64 {
        bail!("module dependency loop at {name}");
    }
    if !seen.insert(name.to_string()) {
        return Ok(());
    }
    let Some(rel) = index.get(name) else {
        if builtin.contains(name) {
            return Ok(());
        }
        bail!(
            "module {name} not found in {} (nor built in)",
            kernel.modules_dir.display()
        );
    };
    let data = decompress(&kernel.modules_dir.join(rel))?;
    for dep in modinfo_depends(&data) {
        visit(&norm(&dep), index, builtin, seen, order, kernel, depth + 1)?;
    }
    let rel = rel.to_string_lossy();
    let rel = rel.split(".ko").next().unwrap_or(&rel).to_string() + ".ko";
    order.push(Module {
        name: name.to_string(),
        rel,
        data,
    });
    Ok(())
}

fn index_modules(root: &Path, dir: &Path, index: &mut BTreeMap<String, PathBuf>) -> Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            index_modules(root, &p, index)?;
            continue;
        }
        let f = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
            .iter()
            .find_map(|s| f.strip_suffix(s))
        {
            index
                .entry(norm(stem))
                .or_insert_with(|| p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
    Ok(())
}

fn decompress(path: &Path) -> Result<Vec<u8>> {
    let s = path.to_string_lossy();
    let tool = if s.ends_with(".xz") {
        "xz"
    } else if s.ends_with(".zst") {
        "zstd"
    } else if s.ends_with(".gz") {
        "gzip"
    } else {
        return Ok(fs::read(path)?);
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .with_context(|| {
            format!(
                "cannot run {tool} to decompress {} (cargo xtask setup)",
                path.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "{tool} -dc {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// The `depends=` entry of a module's .modinfo section (NUL-separated `key=value` strings).
fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    let pat = b"depends=";
    let mut i = 0;
    while let Some(pos) = ko[i..].windows(pat.len()).position(|w| w == pat) {
        let at = i + pos;
        if at == 0 || ko[at - 1] == 0 {
            let start = at + pat.len();
            let end = ko[start..]
                .iter()
                .position(|&b| b == 0)
                .map_or(ko.len(), |e| start + e);
            return String::from_utf8_lossy(&ko[start..end])
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        i = at + 1;
    }
    Vec::new()
}

/// What goes into one lab initramfs.
pub struct Contents<'a> {
    pub kernel: &'a Kernel,
    pub modules: &'a [Module],
    pub script: &'a Path,
    pub args: &'a [String],
    pub extra: &'a [(PathBuf, String)],
    /// ppscope binary (already stripped), installed as /usr/bin/ppscope.
    pub ppscope: Option<&'a Path>,
    pub shell: bool,
    pub macs: [&'a str; 2],
}

/// Quote for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn build(c: &Contents) -> Result<Archive> {
    let mut ar = Archive::default();
    for d in [
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "usr/local/bin",
        "etc",
        "proc",
        "sys",
        "dev",
        "run",
        "tmp",
        "root",
        "lab",
        "mnt",
    ] {
        ar.dir(d);
    }
    for l in ["bin", "sbin", "lib", "lib64"] {
        ar.symlink(l, &format!("usr/{l}"));
    }
    ar.chardev("dev/console", 5, 1);
    ar.chardev("dev/null", 1, 3);
    ar.chardev("dev/ttyS0", 4, 64);
    ar.chardev("dev/ttyS1", 4, 65);
    ar.file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\n".to_vec(),
        0o644,
    );
    ar.file("etc/group", b"root:x:0:\n".to_vec(), 0o644);
    ar.file(
        "etc/hosts",
        b"127.0.0.1 localhost\n198.18.0.1 ppa\n198.18.0.2 ppb\n198.18.1.1 ppc\n198.18.1.2 ppd\n"
            .to_vec(),
        0o644,
    );
    ar.file("etc/profile", b"export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nexport PS1='ppscope-vm# '\n".to_vec(), 0o644);

    // Real tools first, so that busybox applets never shadow them.
    for t in REQUIRED_TOOLS {
        let host = which(t)
            .with_context(|| format!("{t} not found on the host: run `cargo xtask setup`"))?;
        add_binary(&mut ar, &host, &format!("usr/sbin/{t}"))?;
    }
    for t in OPTIONAL_TOOLS {
        if let Some(host) = which(t) {
            add_binary(&mut ar, &host, &format!("usr/sbin/{t}"))?;
        }
    }
    let dash = which(SHELL)
        .with_context(|| format!("{SHELL} not found on the host (Debian package dash)"))?;
    add_binary(&mut ar, &dash, "usr/bin/dash")?;
    ar.symlink("usr/bin/sh", "dash");
    if let Some(p) = c.ppscope {
        add_binary(&mut ar, p, "usr/bin/ppscope")?;
    }

    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .context("busybox not found: install busybox-static (cargo xtask setup)")?;
    if !shared_libs(busybox)?.is_empty() {
        bail!(
            "{} is dynamically linked: install busybox-static",
            busybox.display()
        );
    }
    ar.copy(busybox, "usr/bin/busybox")?;
    let list = Command::new(busybox)
        .arg("--list-full")
        .output()
        .context("busybox --list-full")?;
    let mut taken: BTreeSet<String> = REQUIRED_TOOLS
        .iter()
        .chain(OPTIONAL_TOOLS)
        .map(|s| s.to_string())
        .collect();
    taken.extend(["busybox", "sh", "dash"].map(String::from));
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let guest = usr_path(&format!("/{}", applet.trim()));
        let name = guest.rsplit('/').next().unwrap_or_default().to_string();
        if name.is_empty() || !taken.insert(name) {
            continue;
        }
        ar.symlink(&guest, "/usr/bin/busybox");
    }

    let modroot = format!("usr/lib/modules/{}", c.kernel.version);
    ar.dir(&modroot);
    for m in c.modules {
        ar.file(&format!("{modroot}/{}", m.rel), m.data.clone(), 0o644);
    }
    ar.file("init", INIT_SCRIPT.as_bytes().to_vec(), 0o755);
    add_lab(&mut ar, c)?;
    Ok(ar)
}

/// `/lab`: the settings `/init` reads, the script, its arguments and shared helpers, and the
/// caller's extra files (last, so an extra file may replace any of the others).
fn add_lab(ar: &mut Archive, c: &Contents) -> Result<()> {
    let modules: Vec<&str> = c.modules.iter().map(|m| m.rel.as_str()).collect();
    ar.file(
        "lab/config.sh",
        format!(
            "MODE={}\nMODULES={}\nNICS=1\nMAC0={}\nMAC1={}\n",
            if c.shell { "shell" } else { "run" },
            sh_quote(&modules.join(" ")),
            c.macs[0],
            c.macs[1]
        )
        .into_bytes(),
        0o644,
    );
    let mut args = String::from("set --");
    for a in c.args {
        args.push(' ');
        args.push_str(&sh_quote(a));
    }
    args.push('\n');
    ar.file("lab/args.sh", args.into_bytes(), 0o644);
    ar.file("lab/lib.sh", LAB_LIB.as_bytes().to_vec(), 0o644);
    ar.copy(c.script, "lab/script")?;
    for (host, guest) in c.extra {
        ar.copy_tree(host, guest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn depends_parse() {
        let ko = b"\x7fELF....\0license=GPL\0depends=net_failover,foo\0vermagic=x\0";
        assert_eq!(modinfo_depends(ko), vec!["net_failover", "foo"]);
        assert!(modinfo_depends(b"\0depends=\0").is_empty());
    }

    #[test]
    fn usr_merge() {
        assert_eq!(
            usr_path("/lib/x86_64-linux-gnu/libc.so.6"),
            "/usr/lib/x86_64-linux-gnu/libc.so.6"
        );
        assert_eq!(
            usr_path("/lib64/ld-linux-x86-64.so.2"),
            "/usr/lib64/ld-linux-x86-64.so.2"
        );
        assert_eq!(usr_path("/usr/lib/x"), "/usr/lib/x");
    }

    /// The archive's bytes for a file at `path`.
    fn data<'a>(ar: &'a Archive, path: &str) -> &'a [u8] {
        match ar.nodes.get(&key(path)) {
            Some(Node::File { data, .. }) => data,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn lab_dir_ships_the_shared_helpers() {
        let dir = std::env::temp_dir().join(format!("ppscope-lab-files-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let script = dir.join("probe.sh");
        fs::write(&script, "set -eu\n. /lab/lib.sh\n").unwrap();
        let tool = dir.join("tool");
        fs::write(&tool, "x").unwrap();
        let kernel = Kernel {
            version: "0.0.0-test".into(),
            package_version: "0".into(),
            suite: "sid".into(),
            dir: dir.clone(),
            vmlinuz: dir.join("vmlinuz"),
            modules_dir: dir.clone(),
            config: None,
            system_map: None,
        };
        let modules = [Module {
            name: "veth".into(),
            rel: "kernel/drivers/net/veth.ko".into(),
            data: Vec::new(),
        }];
        let args = ["a b".to_string()];
        let extra = [(tool, "/lab/tool".to_string())];
        let c = Contents {
            kernel: &kernel,
            modules: &modules,
            script: &script,
            args: &args,
            extra: &extra,
            ppscope: None,
            shell: false,
            macs: ["m0", "m1"],
        };
        let mut ar = Archive::default();
        let r = add_lab(&mut ar, &c);
        let _ = fs::remove_dir_all(&dir);
        r.unwrap();
        let files: Vec<String> = ar.nodes.keys().map(|k| k.join("/")).collect();
        assert_eq!(
            files,
            [
                "lab",
                "lab/args.sh",
                "lab/config.sh",
                "lab/lib.sh",
                "lab/script",
                "lab/tool"
            ]
        );
        assert_eq!(data(&ar, "lab/lib.sh"), LAB_LIB.as_bytes());
        assert_eq!(data(&ar, "lab/script"), b"set -eu\n. /lab/lib.sh\n");
        assert_eq!(data(&ar, "lab/args.sh"), b"set -- 'a b'\n");
        let config = String::from_utf8_lossy(data(&ar, "lab/config.sh")).into_owned();
        assert!(
            config.contains("MODULES='kernel/drivers/net/veth.ko'\n"),
            "{config}"
        );
    }

    /// Every lab script sources the shared helpers (and defines none of them again), and it
    /// and they parse for the host's sh (dash on Debian, as in the guest).
    #[test]
    fn lab_scripts_source_the_helpers_and_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vm-tests");
        let helpers: Vec<&str> = LAB_LIB
            .lines()
            .filter_map(|l| l.strip_suffix("() {"))
            .collect();
        assert!(helpers.contains(&"wait_for"), "{helpers:?}");
        let mut scripts = 0;
        for e in fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".sh") {
                continue;
            }
            let ok = Command::new("sh").arg("-n").arg(&path).status().unwrap();
            assert!(ok.success(), "sh -n {name}");
            if name == "lib.sh" {
                continue;
            }
            scripts += 1;
            let text = fs::read_to_string(&path).unwrap();
            assert!(
                text.lines().any(|l| l == ". /lab/lib.sh"),
                "{name} does not source /lab/lib.sh"
            );
            for h in &helpers {
                assert!(
                    !text.contains(&format!("\n{h}() ")),
                    "{name} defines {h} again: lib.sh has it"
                );
            }
        }
        assert!(scripts >= 8, "only {scripts} scripts in {}", dir.display());
    }

    /// poll_for and wait_for as the scripts use them under `set -eu`: found, timed out (with
    /// the file shown), and the caller's own `i` left alone.
    #[test]
    fn lab_helpers_wait_and_time_out() {
        let dir = std::env::temp_dir().join(format!("ppscope-lab-lib-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("lib.sh");
        fs::write(&lib, LAB_LIB).unwrap();
        let log = dir.join("tool.log");
        fs::write(&log, "starting\nagent serving on x\n").unwrap();
        let run = |body: &str| {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("set -eu\n. \"$0\"\nLOG=\"$1\"\n{body}"))
                .arg(&lib)
                .arg(&log)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        let found = run("i=7; wait_for \"$LOG\" 'agent serving'; echo \"ok $i\"");
        // wait_for's own 90 s are cut short by a poll_for that gives up at once.
        let timed_out = run("poll_for \"$LOG\" nothing 2 || echo \"poll $?\"\n\
             poll_for() { return 1; }\n\
             wait_for \"$LOG\" nothing\n\
             echo not reached");
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(found, (Some(0), "ok 7\n".to_string()));
        assert_eq!(timed_out.0, Some(1), "{}", timed_out.1);
        assert!(timed_out
            .1
            .starts_with("poll 1\ntimed out waiting for 'nothing' in "));
        assert!(timed_out.1.ends_with(":\nstarting\nagent serving on x\n"));
    }

    #[test]
    fn cpio_layout() {
        let mut ar = Archive::default();
        ar.file("a/b/c", b"hello".to_vec(), 0o644);
        ar.symlink("a-link", "a");
        let mut buf = Vec::new();
        ar.write_to(&mut buf).unwrap();
        assert!(buf.starts_with(b"070701"));
        assert_eq!(buf.len() % 4, 0);
        let s = String::from_utf8_lossy(&buf);
        let (a, ab, abc) = (
            s.find("a\0").unwrap(),
            s.find("a/b\0").unwrap(),
            s.find("a/b/c\0").unwrap(),
        );
        assert!(a < ab && ab < abc);
        assert!(s.contains("TRAILER!!!"));
    }
}
