//! The Debian package `cargo xtask package` builds, judged by the real tools: lintian, dpkg
//! on this host, and dpkg in a clean Debian chroot made for the test (mmdebstrap, with
//! systemd as on the hosts it is for) with no checkout or toolchain in it. Each install is
//! enabled, removed and purged again, and what each step leaves is checked.
//!
//! Root (dpkg, chroot), so `#[ignore]`d for a plain `cargo test`; `cargo xtask test` runs
//! them. The chroot is fetched from deb.debian.org (mmdebstrap's default), as setup's
//! packages are.
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

use xtask::{output_text, workspace_root};

const PACKAGE: &str = "ppscope";

/// The package, built once for all tests here.
fn deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| xtask::package::build().expect("cargo xtask package"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (`cargo xtask setup` installs it)"))
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?}:\n{}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A field of the package's control file.
fn control_field(field: &str) -> String {
    ok(Command::new("dpkg-deb")
        .arg("--field")
        .arg(deb())
        .arg(field))
    .trim()
    .to_string()
}

#[test]
#[ignore = "builds the release package: run through `cargo xtask test`"]
fn package_passes_lintian() {
    let out = run(Command::new("lintian")
        .args(["--fail-on", "error,warning", "--info"])
        .arg(deb()));
    let complaints: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "lintian:\n{}",
        output_text(&out)
    );
}

#[test]
#[ignore = "builds the release package: run through `cargo xtask test`"]
fn package_holds_what_a_user_installs_and_depends_on_what_the_binary_links() {
    let listing = ok(Command::new("dpkg-deb").arg("--contents").arg(deb()));
    let files: BTreeSet<&str> = listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('.'))
        .collect();
    for want in [
        "/usr/bin/ppscope",
        "/usr/lib/systemd/system/ppscope-agent.service",
        "/usr/share/man/man1/ppscope.1.gz",
        "/usr/share/man/man1/ppscope-top.1.gz",
        "/usr/share/man/man1/ppscope-doctor.1.gz",
        "/usr/share/bash-completion/completions/ppscope",
        "/usr/share/zsh/vendor-completions/_ppscope",
        "/usr/share/fish/vendor_completions.d/ppscope.fish",
        "/usr/share/ppscope/prometheus/ppscope-alerts.yml",
        "/usr/share/ppscope/grafana/ppscope-dashboard.json",
        "/usr/share/doc/ppscope/copyright",
        "/usr/share/doc/ppscope/changelog.Debian.gz",
    ] {
        assert!(
            files.contains(want),
            "{want} not in the package:\n{listing}"
        );
    }
    // Never enabled by the package itself.
    assert!(
        !files.iter().any(|f| f.contains(".wants/")),
        "the package enables a unit:\n{listing}"
    );

    // Depends: what dpkg-shlibdeps finds the binary needs, less libgcc-s1, which cargo-deb
    // leaves out (Debian and Ubuntu install it on every system: priority required).
    let extracted = scratch("contents");
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb())
        .arg(&extracted));
    let shlibdeps = ok(Command::new("dpkg-shlibdeps")
        .arg("-O")
        .arg("--ignore-missing-info")
        .arg(extracted.join("usr/bin/ppscope"))
        .current_dir(in_source_tree(&extracted)));
    let found: BTreeSet<String> = shlibdeps
        .trim()
        .strip_prefix("shlibs:Depends=")
        .unwrap_or_else(|| panic!("dpkg-shlibdeps said {shlibdeps:?}"))
        .split(", ")
        .filter(|d| !d.starts_with("libgcc-s1"))
        .map(str::to_string)
        .collect();
    let depends: BTreeSet<String> = control_field("Depends")
        .split(", ")
        .map(str::to_string)
        .collect();
    assert_eq!(depends, found, "Depends against dpkg-shlibdeps");

    // The copyright file names the crates linked in, with their licenses.
    let copyright = fs::read_to_string(extracted.join("usr/share/doc/ppscope/copyright")).unwrap();
    for (name, license) in [("btf-rs", "LGPL-2.1"), ("aya ", "MIT OR Apache-2.0")] {
        let section = copyright
            .split(" .\n")
            .find(|s| s.contains(name))
            .unwrap_or_else(|| panic!("{name} not in the copyright file:\n{copyright}"));
        assert!(section.contains(license), "{name}: {license}?\n{section}");
    }
}

/// dpkg-shlibdeps wants to run in a source tree (a `debian/control`): makes `dir` one.
fn in_source_tree(dir: &Path) -> &Path {
    fs::create_dir_all(dir.join("debian")).unwrap();
    fs::write(dir.join("debian/control"), "").unwrap();
    dir
}

/// A fresh directory under `target/package-test/` (on disk: a chroot's device nodes need a
/// file system without `nodev`, which /tmp may have), removed when dropped, pass or fail.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = workspace_root().join("target/package-test").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Runs commands on a system root: this host ("/") or a chroot.
struct System {
    root: PathBuf,
}

impl System {
    fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `program args…` inside the system, from `/`, with a bare environment (no checkout,
    /// no cargo), and /proc and /sys mounted in a chroot (in a mount namespace of its own,
    /// so they go away with the command).
    fn cmd(&self, program: &str, args: &[&str]) -> Command {
        let line = std::iter::once(program)
            .chain(args.iter().copied())
            .map(shell_quote)
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd;
        if self.is_host() {
            cmd = Command::new("sh");
            cmd.args(["-c", &format!("cd / && exec {line}")]);
        } else {
            let root = shell_quote(self.root.to_str().unwrap());
            cmd = Command::new("unshare");
            cmd.args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &format!(
                    "mount --rbind /sys {root}/sys && mount -t proc proc {root}/proc && \
                     exec chroot {root} sh -c 'cd / && exec {}'",
                    line.replace('\'', r"'\''")
                ),
            ]);
        }
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .current_dir("/");
        cmd
    }

    fn ok(&self, program: &str, args: &[&str]) -> String {
        ok(&mut self.cmd(program, args))
    }

    /// Whether `path` is there, a dangling symlink included (a chroot's links point into the
    /// chroot, not at this host's files).
    fn exists(&self, path: &str) -> bool {
        self.root
            .join(path.trim_start_matches('/'))
            .symlink_metadata()
            .is_ok()
    }

    fn installed(&self) -> bool {
        self.cmd("dpkg-query", &["-W", "-f=${Status}", PACKAGE])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
    }

    /// Every path under the directories a package or its scripts may write to (`/usr`,
    /// `/etc`, the state of `deb-systemd-helper`), relative to the system's root.
    fn tree(&self) -> BTreeSet<String> {
        let mut paths = BTreeSet::new();
        let mut todo: Vec<PathBuf> = ["usr", "etc", "var/lib/systemd"]
            .iter()
            .map(|d| self.root.join(d))
            .collect();
        while let Some(dir) = todo.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(path.clone());
                }
                let rel = path.strip_prefix(&self.root).unwrap();
                paths.insert(format!("/{}", rel.display()));
            }
        }
        paths
    }

    /// `systemctl --root`: works on the files, no running systemd needed (there is none in
    /// a chroot, nor on a CI machine).
    fn systemctl(&self, args: &[&str]) -> Output {
        run(Command::new("systemctl")
            .arg(format!("--root={}", self.root.display()))
            .args(args))
    }

    /// Installs the package with `dpkg -i`, checks what a user sees, enables the service,
    /// removes the package with `dpkg -r` (only configuration may stay: the enable and
    /// mask links, deb-systemd-helper's state) and purges it (nothing may stay).
    fn install_check_remove(&self) {
        let inside = if self.is_host() {
            deb().to_path_buf()
        } else {
            let name = deb().file_name().unwrap();
            fs::copy(deb(), self.root.join("tmp").join(name)).unwrap();
            Path::new("/tmp").join(name)
        };
        let before = self.tree();
        let _guard = Purge(self);
        self.ok("dpkg", &["-i", inside.to_str().unwrap()]);
        assert!(self.installed());

        let version = self.ok("ppscope", &["--version"]);
        let first = version.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!("ppscope {}", env!("CARGO_PKG_VERSION")),
            "{version}"
        );
        let commit = version
            .lines()
            .find_map(|l| l.strip_prefix("commit: "))
            .unwrap_or_else(|| panic!("no commit line:\n{version}"));
        assert!(
            commit.len() >= 12 && commit[..12].chars().all(|c| c.is_ascii_hexdigit()),
            "commit {commit:?}"
        );
        assert!(version.contains("built to use:"), "{version}");
        assert!(version.contains("tracepoints"), "{version}");

        // doctor from the package, nothing of the checkout around. Tracepoints serve hooks on
        // any kernel with page_pool tracepoints, whatever else it accepts.
        let doctor = self.ok("ppscope", &["doctor"]);
        assert!(doctor.starts_with("kernel "), "{doctor}");
        assert!(
            doctor
                .lines()
                .any(|l| l.starts_with("tracepoints") && l.contains("serve")),
            "{doctor}"
        );

        // The installed unit is the one in deploy/, run from /usr/bin, installed disabled.
        let unit_path = self
            .root
            .join("usr/lib/systemd/system/ppscope-agent.service");
        let unit = fs::read_to_string(&unit_path).unwrap();
        let shipped =
            fs::read_to_string(workspace_root().join("deploy/systemd/ppscope-agent.service"))
                .unwrap();
        assert_eq!(
            unit,
            shipped.replace(
                "ExecStart=/usr/local/bin/ppscope ",
                "ExecStart=/usr/bin/ppscope "
            )
        );
        let state = self.systemctl(&["is-enabled", "ppscope-agent.service"]);
        assert_eq!(
            String::from_utf8_lossy(&state.stdout).trim(),
            "disabled",
            "{}",
            output_text(&state)
        );
        if self.is_host() {
            // With its binary installed, the unit verifies without a complaint.
            let out = run(Command::new("systemd-analyze")
                .arg("verify")
                .arg(&unit_path));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && !stderr.contains("ppscope-agent"),
                "systemd-analyze verify:\n{}",
                output_text(&out)
            );
        }
        // As a user would after install.
        let out = self.systemctl(&["enable", "ppscope-agent.service"]);
        assert!(
            out.status.success(),
            "systemctl enable:\n{}",
            output_text(&out)
        );
        assert!(self.exists("/etc/systemd/system/multi-user.target.wants/ppscope-agent.service"));

        self.ok("dpkg", &["-r", PACKAGE]);
        let removed = self.tree();
        let left: Vec<&String> = removed
            .difference(&before)
            .filter(|p| {
                !p.starts_with("/etc/systemd/")
                    && !p.starts_with("/var/lib/systemd/deb-systemd-helper-")
            })
            .collect();
        assert!(
            left.is_empty(),
            "dpkg -r left more than configuration: {left:?}"
        );
        assert!(!self.exists("/usr/bin/ppscope"));

        self.ok("dpkg", &["--purge", PACKAGE]);
        assert!(!self.installed());
        let purged = self.tree();
        let left: Vec<&String> = purged.difference(&before).collect();
        assert!(left.is_empty(), "dpkg --purge left: {left:?}");
        let gone: Vec<&String> = before.difference(&purged).collect();
        assert!(gone.is_empty(), "install and purge removed: {gone:?}");
    }
}

/// Purges the package if a check failed halfway, so a failed test leaves no install.
struct Purge<'a>(&'a System);

impl Drop for Purge<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.cmd("dpkg", &["--purge", PACKAGE]).output();
        }
    }
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[test]
#[ignore = "needs root: installs the package on this host with dpkg"]
fn package_installs_runs_and_removes_on_the_host() {
    let host = System { root: "/".into() };
    assert!(
        !host.installed(),
        "a ppscope package is installed on this host; the test installs and removes its own, \
         so it leaves yours alone: `dpkg -r ppscope` first"
    );
    host.install_check_remove();
}

#[test]
#[ignore = "needs root and the Debian archive: a clean chroot (mmdebstrap) to install into"]
fn package_installs_into_a_clean_debian_chroot() {
    let root = scratch("chroot");
    let out = run(Command::new("mmdebstrap")
        .args(["--variant=apt", "--include=systemd", "--quiet", "bookworm"])
        .arg(&root));
    assert!(out.status.success(), "mmdebstrap:\n{}", output_text(&out));
    let chroot = System {
        root: root.to_path_buf(),
    };
    assert!(!chroot.exists("/usr/bin/cargo") && !chroot.exists("/work"));
    chroot.install_check_remove();
}

#[test]
#[ignore = "builds the release package: run through `cargo xtask test`"]
fn packaged_completions_complete_commands_in_bash_fish_and_zsh() {
    let extracted = scratch("completion");
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb())
        .arg(&extracted));
    let usr_share = extracted.join("usr/share");

    let bash = usr_share.join("bash-completion/completions/ppscope");
    let out = ok(Command::new("bash").arg("-c").arg(format!(
        // As bash calls a completion function: the command, the word, the word before.
        "source {}; COMP_WORDS=(ppscope d); COMP_CWORD=1; _ppscope ppscope d ppscope; \
         echo \"${{COMPREPLY[*]}}\"; COMP_WORDS=(ppscope top --det); COMP_CWORD=2; \
         _ppscope ppscope --det top; echo \"${{COMPREPLY[*]}}\"",
        bash.display()
    )));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["diagnose doctor", "--detail"], "bash:\n{out}");
    // Hidden commands (lab helpers, man-pages) are not offered.
    let out = ok(Command::new("bash").arg("-c").arg(format!(
        "source {}; COMP_WORDS=(ppscope ''); COMP_CWORD=1; _ppscope ppscope '' ppscope; \
         echo \"${{COMPREPLY[*]}}\"",
        bash.display()
    )));
    for word in out.split_whitespace() {
        assert!(
            !["lab", "man-pages"].contains(&word),
            "bash offers {word}: {out}"
        );
    }

    let fish = usr_share.join("fish/vendor_completions.d/ppscope.fish");
    let out = ok(Command::new("fish").arg("-c").arg(format!(
        "source {}; complete -C 'ppscope d'; complete -C 'ppscope top --det'; \
         complete -C 'ppscope '",
        fish.display()
    )));
    let words: Vec<&str> = out.lines().filter_map(|l| l.split('\t').next()).collect();
    assert_eq!(
        words[..3],
        ["diagnose", "doctor", "--detail"],
        "fish:\n{out}"
    );
    assert!(words[3..].contains(&"top"), "fish:\n{out}");
    for hidden in ["lab", "man-pages"] {
        assert!(!words.contains(&hidden), "fish offers {hidden}:\n{out}");
    }

    // zsh: its completion system needs a terminal to drive; the script must parse and offer
    // every command `--help` lists.
    let zsh = usr_share.join("zsh/vendor-completions/_ppscope");
    ok(Command::new("zsh").arg("-n").arg(&zsh));
    let script = fs::read_to_string(&zsh).unwrap();
    assert!(script.starts_with("#compdef ppscope"), "{script}");
    assert!(!script.contains("man-pages"), "zsh offers a hidden command");
    for command in [
        "top",
        "diagnose",
        "record",
        "simulate",
        "agent",
        "doctor",
        "completions",
    ] {
        assert!(
            script.contains(&format!("'{command}:")),
            "zsh completion lacks {command}"
        );
    }
}
