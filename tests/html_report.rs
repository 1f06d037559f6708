//! The HTML report as a person sees it: written by `ppscope diagnose --replay … --html` and
//! `ppscope simulate --replay … --html` from a recording of a starving pool, then opened by a
//! real browser (Debian's chromium, headless, offline): the page it paints must not be blank
//! and must show the curve's and the timeline's colours, and the DOM it parsed must hold the
//! report's parts in order.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use ppscope::testing;

const PPSCOPE: &str = env!("CARGO_BIN_EXE_ppscope");

/// A fresh directory for this test's files, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ppscope-html-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ppscope(args: &[&str]) {
    let out = Command::new(PPSCOPE).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ppscope {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn chromium(args: &[&str], page: &Path) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        // Offline: a page that fetched anything would fail to paint it.
        .args(["--disable-background-networking", "--no-proxy-server"])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium (installed by `cargo xtask setup`)")
}

/// Renders `page` to a PNG of 900 px wide and returns its RGB(A) pixels.
fn paint(page: &Path) -> (png::OutputInfo, Vec<u8>) {
    let shot = page.with_extension("png");
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=900,2400",
        ],
        page,
    );
    assert!(
        shot.exists(),
        "chromium painted nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info, buf)
}

/// Share of the page's pixels that are not white, and whether any is near `rgb`.
fn ink(info: &png::OutputInfo, px: &[u8], rgb: [u8; 3]) -> (f64, bool) {
    let step = info.color_type.samples();
    let (mut inked, mut found) = (0usize, false);
    for p in px.chunks(step) {
        if p[..3].iter().any(|&c| c < 235) {
            inked += 1;
        }
        if p[..3].iter().zip(rgb).all(|(&a, b)| a.abs_diff(b) <= 24) {
            found = true;
        }
    }
    (inked as f64 / (px.len() / step) as f64, found)
}

/// The DOM as the browser parsed it.
fn dom(page: &Path) -> String {
    let out = chromium(&["--dump-dom"], page);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs chromium (cargo xtask setup): run through `cargo xtask test`"]
fn a_browser_paints_the_diagnose_and_simulate_reports() {
    let dir = Dir::new("reports");
    let rec = dir.0.join("starving.ppr");
    testing::write_starving_recording(&rec);
    let diagnose = dir.0.join("diagnose.html");
    let simulate = dir.0.join("simulate.html");
    let (rec_s, diag_s, sim_s) = (
        rec.to_str().unwrap(),
        diagnose.to_str().unwrap(),
        simulate.to_str().unwrap(),
    );
    ppscope(&[
        "diagnose",
        "--replay",
        rec_s,
        "--interval",
        "100ms",
        "--html",
        diag_s,
    ]);
    ppscope(&["simulate", "--replay", rec_s, "--html", sim_s]);

    let parsed = dom(&diagnose);
    let at = |needle: &str| {
        parsed
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in the DOM chromium parsed:\n{parsed}"))
    };
    // The verdict first (a starving pool, what to change), then the pool's timeline,
    // histogram and advice curve, then what served each hook.
    assert!(at("class=\"verdict starving\"") < at("class=\"timeline\""));
    assert!(at("<b>Knob:</b>") < at("class=\"timeline\""));
    assert!(at("class=\"series slow\"") < at("class=\"series ring_full\""));
    assert!(at("class=\"timeline\"") < at("class=\"histogram\""));
    assert!(at("class=\"histogram\"") < at("class=\"curve\""));
    assert!(at("class=\"current\"") < at("id=\"coverage\""));

    let (info, px) = paint(&diagnose);
    assert_eq!(info.width, 900, "{info:?}");
    let (share, blue) = ink(&info, &px, [0x15, 0x65, 0xc0]);
    assert!(share > 0.02, "a blank page: {:.3}% inked", share * 100.0);
    assert!(blue, "no curve or timeline line painted (#1565c0)");
    let (_, red) = ink(&info, &px, [0xc6, 0x28, 0x28]);
    assert!(
        red,
        "no starving verdict or slow-path line painted (#c62828)"
    );
    // Keep the picture where a person can look at it (target/, not the repository).
    let keep = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("diagnose-report.png");
    std::fs::copy(diagnose.with_extension("png"), &keep).unwrap();

    let parsed = dom(&simulate);
    assert!(parsed.contains("class=\"curve\""), "{parsed}");
    assert!(parsed.contains("class=\"current\""), "{parsed}");
    let (info, px) = paint(&simulate);
    let (share, blue) = ink(&info, &px, [0x15, 0x65, 0xc0]);
    assert!(
        share > 0.01 && blue,
        "simulate's page: {share:.3} inked, curve {blue}"
    );
}
