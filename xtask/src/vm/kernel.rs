//! Debian kernels for the VM lab: resolve a version through a private apt state (never the
//! system's), download with `apt-get download`, extract with `dpkg-deb -x`, cache.
//!
//! Layout under the cache directory (`$PPSCOPE_VM_CACHE`, default `~/.cache/ppscope/vm`):
//! `apt/<suite>/` (sources.list, lists, stamp), `resolved-<suite>` (the ABI name the suite's
//! `linux-image-amd64` pointed to) and `kernels/<abi>/` (the extracted packages plus
//! `ppscope-kernel.txt`, written last, which marks the tree complete).

use anyhow::{bail, Context, Result};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

/// Apt lists and suite resolutions older than this are refreshed.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const MIRROR: &str = "http://deb.debian.org/debian";
const META_FILE: &str = "ppscope-kernel.txt";

/// Which Debian kernel to boot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KernelChoice {
    /// The current `linux-image-amd64` of Debian sid.
    #[default]
    Sid,
    /// The current `linux-image-amd64` of Debian trixie (6.12.x).
    Trixie,
    /// An exact upstream version (`7.2.13`) or ABI name (`7.2.13+deb14-amd64`) found in sid or
    /// trixie (or already cached).
    Version(String),
}

impl FromStr for KernelChoice {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "" => bail!("empty kernel choice"),
            "sid" | "unstable" => Ok(KernelChoice::Sid),
            "trixie" | "stable" => Ok(KernelChoice::Trixie),
            v if v.starts_with(|c: char| c.is_ascii_digit()) => Ok(KernelChoice::Version(v.into())),
            v => bail!("unknown kernel {v:?}: use sid, trixie or a version such as 7.2.13"),
        }
    }
}

impl fmt::Display for KernelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelChoice::Sid => f.write_str("sid"),
            KernelChoice::Trixie => f.write_str("trixie"),
            KernelChoice::Version(v) => f.write_str(v),
        }
    }
}

/// A fetched, extracted kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The ABI name, which is also the guest's `uname -r` (e.g. `7.2.13+deb14-amd64`).
    pub version: String,
    /// The Debian package version (e.g. `7.2.13-1`).
    pub package_version: String,
    /// The suite it came from (`sid`, `trixie`).
    pub suite: String,
    /// The extracted tree.
    pub dir: PathBuf,
    pub vmlinuz: PathBuf,
    /// `.../lib/modules/<version>` (modules are compressed, as Debian ships them).
    pub modules_dir: PathBuf,
    pub config: Option<PathBuf>,
    pub system_map: Option<PathBuf>,
}

/// The cache root: `$PPSCOPE_VM_CACHE` or `~/.cache/ppscope/vm`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PPSCOPE_VM_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("ppscope").join("vm")
}

/// Fetch (or reuse from the cache) the kernel for `choice`.
pub fn fetch(choice: &KernelChoice) -> Result<Kernel> {
    let cache = cache_dir();
    fs::create_dir_all(cache.join("kernels"))
        .with_context(|| format!("creating the VM cache {}", cache.display()))?;
    // Serialise fetches: parallel tests would otherwise race on apt state and extraction.
    let lock = fs::File::create(cache.join("lock"))?;
    lock.lock().context("locking the VM cache")?;
    let r = fetch_locked(&cache, choice);
    let _ = lock.unlock();
    r
}

fn fetch_locked(cache: &Path, choice: &KernelChoice) -> Result<Kernel> {
    match choice {
        KernelChoice::Sid => fetch_suite(cache, "sid"),
        KernelChoice::Trixie => fetch_suite(cache, "trixie"),
        KernelChoice::Version(v) => fetch_version(cache, v),
    }
}

fn fetch_suite(cache: &Path, suite: &str) -> Result<Kernel> {
    let resolved = cache.join(format!("resolved-{suite}"));
    if is_fresh(&resolved) {
        let abi = fs::read_to_string(&resolved)?.trim().to_string();
        if let Some(k) = load_cached(cache, &abi)? {
            return Ok(k);
        }
    }
    let apt = Apt::new(cache, suite);
    if let Err(e) = apt.update(true) {
        // Offline, but we have what the suite pointed to last time: use it.
        if let Ok(abi) = fs::read_to_string(&resolved) {
            if let Some(k) = load_cached(cache, abi.trim())? {
                eprintln!(
                    "vm: warning: could not refresh {suite} ({e:#}); using cached {}",
                    k.version
                );
                return Ok(k);
            }
        }
        return Err(e);
    }
    let abi = apt
        .depends("linux-image-amd64")?
        .into_iter()
        .find_map(|d| d.strip_prefix("linux-image-").map(str::to_string))
        .with_context(|| {
            format!("{suite}: linux-image-amd64 depends on no linux-image-* package")
        })?;
    let k = match load_cached(cache, &abi)? {
        Some(k) => k,
        None => download(cache, &apt, &abi)?,
    };
    fs::write(&resolved, format!("{abi}\n"))?;
    Ok(k)
}

fn fetch_version(cache: &Path, want: &str) -> Result<Kernel> {
    // Already cached: no network at all.
    if let Ok(rd) = fs::read_dir(cache.join("kernels")) {
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| version_matches(n, want))
            .collect();
        names.sort();
        for n in names.iter().rev() {
            if let Some(k) = load_cached(cache, n)? {
                return Ok(k);
            }
        }
    }
    let mut available = Vec::new();
    for suite in ["sid", "trixie"] {
        let apt = Apt::new(cache, suite);
        let mut refreshed = apt.update(false)?;
        loop {
            let abis = apt.kernel_abis()?;
            let mut hits: Vec<&String> = abis.iter().filter(|a| version_matches(a, want)).collect();
            hits.sort();
            if let Some(abi) = hits.last() {
                return download(cache, &apt, abi);
            }
            if refreshed {
                available.extend(abis.into_iter().map(|a| format!("{a} ({suite})")));
                break;
            }
            apt.update(true)?;
            refreshed = true;
        }
    }
    available.sort();
    bail!(
        "kernel version {want} not found in Debian sid or trixie; available: {}",
        if available.is_empty() {
            "none".to_string()
        } else {
            available.join(", ")
        }
    )
}

/// `7.2.13` matches `7.2.13+deb14-amd64`; a full ABI name matches itself.
fn version_matches(abi: &str, want: &str) -> bool {
    abi == want
        || abi
            .strip_prefix(want)
            .is_some_and(|rest| rest.starts_with('+') || rest.starts_with('-'))
}

fn is_fresh(path: &Path) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < MAX_AGE)
}

/// Load a complete cached kernel tree, if there is one.
fn load_cached(cache: &Path, abi: &str) -> Result<Option<Kernel>> {
    let dir = cache.join("kernels").join(abi);
    let Ok(meta) = fs::read_to_string(dir.join(META_FILE)) else {
        return Ok(None);
    };
    let get = |k: &str| {
        meta.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
            .unwrap_or("")
            .to_string()
    };
    Ok(Some(locate(
        &dir,
        abi,
        get("suite"),
        get("package_version"),
    )?))
}

/// Find vmlinuz, modules, config and System.map in an extracted tree (both Debian layouts:
/// trixie's single `linux-image-*` with `/boot`, and sid's split `linux-binary-*`,
/// `linux-modules-*`, `linux-base-*` under `/usr/lib/modules/<abi>/`).
fn locate(dir: &Path, abi: &str, suite: String, package_version: String) -> Result<Kernel> {
    let first = |cands: &[String]| cands.iter().map(|c| dir.join(c)).find(|p| p.exists());
    let vmlinuz = first(&[
        format!("boot/vmlinuz-{abi}"),
        format!("usr/lib/modules/{abi}/vmlinuz"),
        format!("lib/modules/{abi}/vmlinuz"),
    ])
    .with_context(|| format!("no vmlinuz in {}", dir.display()))?;
    let modules_dir = first(&[
        format!("usr/lib/modules/{abi}"),
        format!("lib/modules/{abi}"),
    ])
    .with_context(|| format!("no lib/modules/{abi} in {}", dir.display()))?;
    let config = first(&[
        format!("boot/config-{abi}"),
        format!("usr/lib/modules/{abi}/config"),
    ]);
    let system_map = first(&[
        format!("boot/System.map-{abi}"),
        format!("usr/lib/modules/{abi}/System.map"),
    ]);
    Ok(Kernel {
        version: abi.to_string(),
        package_version,
        suite,
        dir: dir.to_path_buf(),
        vmlinuz,
        modules_dir,
        config,
        system_map,
    })
}

fn download(cache: &Path, apt: &Apt, abi: &str) -> Result<Kernel> {
    let image = format!("linux-image-{abi}");
    let mut pkgs = vec![image.clone()];
    // Newer packaging: linux-image-<abi> is a meta package over linux-{base,binary,modules}-<abi>.
    for d in apt.depends(&image)? {
        if d.starts_with("linux-") && d.ends_with(&format!("-{abi}")) && !pkgs.contains(&d) {
            pkgs.push(d);
        }
    }
    let final_dir = cache.join("kernels").join(abi);
    let tmp = cache.join("kernels").join(format!(".{abi}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    let debs = tmp.join("debs");
    let root = tmp.join("root");
    fs::create_dir_all(&debs)?;
    fs::create_dir_all(&root)?;
    eprintln!(
        "vm: downloading {} from Debian {}",
        pkgs.join(" "),
        apt.suite
    );
    let mut cmd = apt.cmd("apt-get");
    cmd.arg("-q").arg("download").args(&pkgs).current_dir(&debs);
    run_checked(&mut cmd, "apt-get download (kernel packages)")?;
    let mut package_version = String::new();
    for e in fs::read_dir(&debs)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "deb") {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            // <name>_<version>_<arch>.deb, with ':' of an epoch written as %3a.
            let mut parts = name.split('_');
            if parts.next() == Some(image.as_str()) {
                package_version = parts.next().unwrap_or("").replace("%3a", ":");
            }
            run_checked(
                Command::new("dpkg-deb").arg("-x").arg(&p).arg(&root),
                &format!("dpkg-deb -x {name}"),
            )?;
        }
    }
    // Check the tree before we commit it to the cache.
    locate(&root, abi, apt.suite.clone(), package_version.clone())?;
    fs::write(
        root.join(META_FILE),
        format!(
            "version={abi}\npackage_version={package_version}\nsuite={}\npackages={}\n",
            apt.suite,
            pkgs.join(" ")
        ),
    )?;
    let _ = fs::remove_dir_all(&final_dir);
    fs::rename(&root, &final_dir)?;
    let _ = fs::remove_dir_all(&tmp);
    locate(&final_dir, abi, apt.suite.clone(), package_version)
}

fn run_checked(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| {
        format!(
            "{what}: cannot run {:?} (run `cargo xtask setup`)",
            cmd.get_program()
        )
    })?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A private apt state for one Debian suite.
struct Apt {
    suite: String,
    dir: PathBuf,
}

impl Apt {
    fn new(cache: &Path, suite: &str) -> Apt {
        Apt {
            suite: suite.to_string(),
            dir: cache.join("apt").join(suite),
        }
    }

    fn cmd(&self, prog: &str) -> Command {
        let d = &self.dir;
        let mut c = Command::new(prog);
        for (k, v) in [
            ("Dir::Etc::SourceList", d.join("sources.list")),
            ("Dir::Etc::SourceParts", "/dev/null".into()),
            ("Dir::Etc::Preferences", "/dev/null".into()),
            ("Dir::Etc::PreferencesParts", "/dev/null".into()),
            ("Dir::State::Lists", d.join("lists")),
            ("Dir::Cache", d.join("cache")),
            ("Dir::State::status", "/dev/null".into()),
        ] {
            c.arg("-o").arg(format!("{k}={}", v.display()));
        }
        for o in [
            "APT::Architecture=amd64",
            "APT::Architectures=amd64",
            "APT::Sandbox::User=root",
            "Debug::NoLocking=true",
        ] {
            c.arg("-o").arg(o);
        }
        c.env("LC_ALL", "C");
        c
    }

    /// Refresh the lists if `force`, or if they are missing or older than a day. Returns
    /// whether it refreshed.
    fn update(&self, force: bool) -> Result<bool> {
        let stamp = self.dir.join("stamp");
        if !force && is_fresh(&stamp) {
            return Ok(false);
        }
        for sub in ["lists/partial", "cache/archives/partial"] {
            fs::create_dir_all(self.dir.join(sub))?;
        }
        if !Path::new(KEYRING).exists() {
            bail!("{KEYRING} is missing: install debian-archive-keyring (cargo xtask setup)");
        }
        fs::write(
            self.dir.join("sources.list"),
            format!("deb [signed-by={KEYRING}] {MIRROR} {} main\n", self.suite),
        )?;
        eprintln!("vm: refreshing the Debian {} package lists", self.suite);
        let mut c = self.cmd("apt-get");
        c.args(["-q", "update"]);
        let out = run_checked(&mut c, &format!("apt-get update ({})", self.suite))?;
        if out.contains("Err:") {
            bail!("apt-get update ({}) reported errors:\n{out}", self.suite);
        }
        fs::write(&stamp, "")?;
        Ok(true)
    }

    /// Names of the packages `pkg` depends on (first alternatives included).
    fn depends(&self, pkg: &str) -> Result<Vec<String>> {
        let mut c = self.cmd("apt-cache");
        c.args(["depends", pkg]);
        let out = run_checked(&mut c, &format!("apt-cache depends {pkg} ({})", self.suite))?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_start_matches('|');
                l.strip_prefix("Depends: ")
                    .or_else(|| l.strip_prefix("PreDepends: "))
            })
            .map(|n| n.trim().to_string())
            .filter(|n| !n.starts_with('<'))
            .collect())
    }

    /// ABI names of the generic amd64 kernels in this suite (`6.12.117+deb13-amd64`, ...).
    fn kernel_abis(&self) -> Result<Vec<String>> {
        let mut c = self.cmd("apt-cache");
        c.args(["pkgnames", "linux-image-"]);
        let out = run_checked(&mut c, &format!("apt-cache pkgnames ({})", self.suite))?;
        let mut v: Vec<String> = out
            .lines()
            .filter_map(|l| l.trim().strip_prefix("linux-image-"))
            .filter(|a| a.starts_with(|c: char| c.is_ascii_digit()))
            .filter(|a| {
                a.ends_with("-amd64") && !a.ends_with("-cloud-amd64") && !a.ends_with("-rt-amd64")
            })
            .map(str::to_string)
            .collect();
        v.sort();
        v.dedup();
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_choice() {
        assert_eq!("sid".parse::<KernelChoice>().unwrap(), KernelChoice::Sid);
        assert_eq!(
            "trixie".parse::<KernelChoice>().unwrap(),
            KernelChoice::Trixie
        );
        assert_eq!(
            "6.12.117".parse::<KernelChoice>().unwrap(),
            KernelChoice::Version("6.12.117".into())
        );
        assert!("bogus".parse::<KernelChoice>().is_err());
    }

    #[test]
    fn version_match() {
        assert!(version_matches("7.2.13+deb14-amd64", "7.2.13"));
        assert!(version_matches("7.2.13+deb14-amd64", "7.2.13+deb14-amd64"));
        assert!(!version_matches("7.2.130+deb14-amd64", "7.2.13"));
        assert!(version_matches("6.1.0-28-amd64", "6.1.0"));
    }
}
