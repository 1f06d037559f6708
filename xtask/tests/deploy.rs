//! Checks of the deployment files in `deploy/` with the real tools: `systemd-analyze` (package
//! `systemd`), `promtool` (package `prometheus`) and Python's YAML parser (package
//! `python3-yaml`) for the Kubernetes and Prometheus YAML. The Grafana dashboard is read with
//! serde_json. No root needed; a missing tool fails the test with the package to install.
//!
//! Every PromQL expression (alerts and dashboard) may only use the metric names that
//! `ppscope agent` exports: its exporter's own family table (`ppscope::export::metrics`).
use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;
use xtask::output_text;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .join("deploy")
}

fn read(rel: &str) -> String {
    let path = deploy_dir().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ppscope-deploy-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `tool args…`; panics naming the Debian package when the tool is not installed.
fn run(tool: &str, package: &str, args: &[&str], cwd: Option<&Path>) -> Output {
    let mut cmd = Command::new(tool);
    cmd.args(args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{tool}` is not installed: `apt-get install -y --no-install-recommends {package}` \
             (or `cargo xtask setup`)"
        ),
        Err(e) => panic!("cannot run {tool}: {e}"),
    }
}

/// Every YAML document of `rel`, as JSON, parsed by PyYAML (Debian's python3-yaml).
fn yaml_docs(rel: &str) -> Vec<Value> {
    const SCRIPT: &str =
        "import json, sys, yaml; json.dump(list(yaml.safe_load_all(sys.stdin)), sys.stdout)";
    let source = read(rel);
    for python in ["/usr/bin/python3", "python3"] {
        let has_yaml = Command::new(python)
            .args(["-c", "import yaml"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_yaml {
            continue;
        }
        let mut child = Command::new(python)
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(source.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{rel} is not valid YAML:\n{}",
            output_text(&out)
        );
        match serde_json::from_slice(&out.stdout).unwrap() {
            Value::Array(docs) => return docs,
            other => panic!("unexpected parse of {rel}: {other}"),
        }
    }
    panic!(
        "no python3 with the yaml module: `apt-get install -y --no-install-recommends \
         python3-yaml` (or `cargo xtask setup`)"
    )
}

/// The `ppscope_…` metric names used in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let bytes = expr.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut names = Vec::new();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("ppscope_") {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len() && ident(bytes[end]) {
            end += 1;
        }
        if start == 0 || !ident(bytes[start - 1]) {
            names.push(expr[start..end].to_string());
        }
        i = end;
    }
    names
}

/// A series name the agent exports: a family's own name, or for a histogram its `_bucket`,
/// `_sum` and `_count` series (which are all a histogram has).
fn known_metric(name: &str) -> bool {
    ppscope::export::metrics::families().any(|(family, kind)| {
        if kind == "histogram" {
            name.strip_prefix(family)
                .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
        } else {
            name == family
        }
    })
}

fn assert_known_metrics(what: &str, expr: &str) {
    for name in metric_names(expr) {
        assert!(
            known_metric(&name),
            "{what} uses `{name}`, which ppscope agent does not export:\n{expr}"
        );
    }
}

/// `key=value` settings of a unit file (comments and sections skipped), in order.
fn unit_settings(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn setting<'a>(settings: &'a [(String, String)], key: &str) -> Option<&'a str> {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

const UNIT: &str = "systemd/ppscope-agent.service";
const CAPS: [&str; 2] = ["CAP_BPF", "CAP_PERFMON"];

#[test]
fn systemd_unit_settings() {
    let unit = read(UNIT);
    let s = unit_settings(&unit);
    let expect = [
        (
            "ExecStart",
            "/usr/local/bin/ppscope agent --listen 127.0.0.1:9464 --interval 1s",
        ),
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("Restart", "on-failure"),
    ];
    for (key, value) in expect {
        assert_eq!(setting(&s, key), Some(value), "{UNIT}: {key}");
    }
    for key in ["AmbientCapabilities", "CapabilityBoundingSet"] {
        let mut caps: Vec<&str> = setting(&s, key)
            .unwrap_or_else(|| panic!("{UNIT}: no {key}"))
            .split_whitespace()
            .collect();
        caps.sort_unstable();
        let mut want = CAPS.to_vec();
        want.sort_unstable();
        assert_eq!(caps, want, "{UNIT}: {key}");
    }
    // Options that would hide /sys/kernel/btf, /sys/fs/bpf or tracefs, or cut the agent off
    // from the host's devices and kernel objects.
    for (key, bad) in [
        ("PrivateNetwork", "yes"),
        ("PrivateUsers", "yes"),
        ("ProcSubset", "pid"),
    ] {
        assert_ne!(
            setting(&s, key),
            Some(bad),
            "{UNIT}: {key}={bad} breaks the agent"
        );
    }
    for key in ["InaccessiblePaths", "TemporaryFileSystem", "BindPaths"] {
        if let Some(v) = setting(&s, key) {
            assert!(
                !v.contains("/sys") && !v.contains("/proc"),
                "{UNIT}: {key}={v} hides what BPF needs"
            );
        }
    }
    // bpf() and perf_event_open() are outside @system-service.
    let filter = setting(&s, "SystemCallFilter").unwrap_or("");
    if !filter.is_empty() {
        for call in ["bpf", "perf_event_open"] {
            assert!(
                filter.split_whitespace().any(|w| w == call),
                "{UNIT}: SystemCallFilter={filter} must allow {call}"
            );
        }
    }
}

#[test]
fn systemd_analyze_verify() {
    // The unit as shipped: the only complaint allowed is the binary that is not installed here.
    let shipped = deploy_dir().join(UNIT);
    let out = run(
        "systemd-analyze",
        "systemd",
        &["verify", shipped.to_str().unwrap()],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ppscope_installed = Path::new("/usr/local/bin/ppscope").exists();
    for line in stderr.lines().filter(|l| l.contains("ppscope-agent")) {
        assert!(
            !ppscope_installed && line.contains("Command /usr/local/bin/ppscope is not executable"),
            "systemd-analyze verify {UNIT}:\n{}",
            output_text(&out)
        );
    }

    // A copy whose ExecStart points at an existing executable must verify cleanly.
    let dir = scratch("systemd");
    let copy = dir.join("ppscope-agent.service");
    fs::write(
        &copy,
        read(UNIT).replace("ExecStart=/usr/local/bin/ppscope ", "ExecStart=/bin/true "),
    )
    .unwrap();
    let out = run(
        "systemd-analyze",
        "systemd",
        &["verify", copy.to_str().unwrap()],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("ppscope-agent"),
        "systemd-analyze verify (ExecStart=/bin/true):\n{}",
        output_text(&out)
    );

    // Offline security review: overall exposure at most 3.0 of 10 ("OK").
    let out = run(
        "systemd-analyze",
        "systemd",
        &[
            "security",
            "--offline=yes",
            "--threshold=30",
            copy.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "systemd-analyze security: exposure above 3.0:\n{}",
        output_text(&out)
    );
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn promtool_check_config_and_rules() {
    let prom = deploy_dir().join("prometheus");
    // From another directory: rule_files must resolve relative to prometheus.yml.
    let elsewhere = scratch("promtool-cwd");
    let config = prom.join("prometheus.yml");
    let out = run(
        "promtool",
        "prometheus",
        &["check", "config", config.to_str().unwrap()],
        Some(&elsewhere),
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 rule files found"),
        "promtool check config:\n{}",
        output_text(&out)
    );
    let _ = fs::remove_dir_all(elsewhere);

    let out = run(
        "promtool",
        "prometheus",
        &["check", "rules", "ppscope-alerts.yml"],
        Some(&prom),
    );
    assert!(
        out.status.success(),
        "promtool check rules:\n{}",
        output_text(&out)
    );

    // The alerts fire (and stay quiet) on synthetic series as their unit tests expect.
    let out = run(
        "promtool",
        "prometheus",
        &["test", "rules", "ppscope-alerts.test.yml"],
        Some(&prom),
    );
    assert!(
        out.status.success(),
        "promtool test rules:\n{}",
        output_text(&out)
    );
}

#[test]
fn prometheus_scrapes_the_agent() {
    let docs = yaml_docs("prometheus/prometheus.yml");
    let config = &docs[0];
    assert_eq!(config["rule_files"][0], "ppscope-alerts.yml");
    let job = config["scrape_configs"]
        .as_array()
        .expect("scrape_configs")
        .iter()
        .find(|j| j["job_name"] == "ppscope")
        .expect("a scrape job named ppscope");
    assert_eq!(job["scrape_interval"], "15s");
    assert_eq!(job["static_configs"][0]["targets"][0], "127.0.0.1:9464");
}

#[test]
fn alert_rules_cover_the_symptoms() {
    let docs = yaml_docs("prometheus/ppscope-alerts.yml");
    let rules: Vec<&Value> = docs[0]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect();
    let mut exprs = Vec::new();
    for rule in &rules {
        let name = rule["alert"].as_str().expect("only alerting rules");
        let expr = rule["expr"].as_str().expect("expr");
        assert_known_metrics(&format!("alert {name}"), expr);
        assert!(rule["for"].is_string(), "alert {name} has no `for:`");
        let severity = rule["labels"]["severity"].as_str().unwrap_or("");
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "alert {name}: severity label `{severity}`"
        );
        let description = rule["annotations"]["description"].as_str().unwrap_or("");
        assert!(
            rule["annotations"]["summary"].is_string() && description.contains("`ppscope "),
            "alert {name}: annotations must have a summary and a description naming the \
             ppscope command to run"
        );
        exprs.push(expr.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    let squeezed = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let required = [
        "rate(ppscope_page_pool_recycle_total{kind=\"ring_full\"}[5m])",
        "histogram_quantile(0.99, sum by (le, instance, device, queue) \
         (rate(ppscope_page_pool_slow_path_seconds_bucket[5m]))",
        "ppscope_devmem_dontneed_seconds_bucket",
        "ppscope_hook_attached{backend!~\"module_not_loaded|left_off\"}) == 0",
        "up{job=\"ppscope\"} == 0",
        "(min_over_time(ppscope_page_pool_health[5m])) >= 2",
    ];
    for want in required {
        let want = squeezed(want);
        assert!(
            exprs.iter().any(|e| e.contains(&want)),
            "no alert uses `{want}`"
        );
    }
    // The ring_full share: ring_full recycles divided by all recycles.
    assert!(
        exprs.iter().any(|e| e.contains("kind=\"ring_full\"")
            && e.contains("/ sum by (instance, device, queue, pool) (rate(ppscope_page_pool_recycle_total[5m]))")),
        "no alert on the share of recycles that find the ring full"
    );
}

#[test]
fn daemonset_fields() {
    let docs = yaml_docs("kubernetes/daemonset.yaml");
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet document");
    assert_eq!(ds["apiVersion"], "apps/v1");
    let template = &ds["spec"]["template"];
    assert!(!ds["spec"]["selector"]["matchLabels"].is_null());
    for (k, v) in ds["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &template["metadata"]["labels"][k], v,
            "selector label {k} missing from the pod template"
        );
    }
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9464");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    let pod = &template["spec"];
    assert!(
        pod["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .any(|t| t["operator"] == "Exists" && t["key"].is_null()),
        "the pod must tolerate every taint (operator: Exists without a key)"
    );
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args.first(), Some(&"agent"), "args: {args:?}");
    assert!(args.contains(&"--listen"), "args: {args:?}");
    let port = &c["ports"][0];
    assert_eq!(port["name"], "metrics");
    assert_eq!(port["containerPort"], 9464);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/healthz");

    let res = &c["resources"];
    for kind in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(res[kind][r].is_string(), "resources.{kind}.{r} missing");
        }
    }
    assert_eq!(res["requests"]["cpu"], "50m");
    assert_eq!(res["requests"]["memory"], "64Mi");

    let sc = &c["securityContext"];
    assert_ne!(sc["privileged"], true, "must not be privileged");
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mut added: Vec<&str> = sc["capabilities"]["add"]
        .as_array()
        .expect("capabilities.add")
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    added.sort_unstable();
    let mut want: Vec<&str> = CAPS.iter().map(|c| &c[4..]).collect();
    want.sort_unstable();
    assert_eq!(added, want, "capabilities.add");

    let volumes = pod["volumes"].as_array().expect("volumes");
    let mounts = c["volumeMounts"].as_array().expect("volumeMounts");
    for host in ["/sys/kernel/btf", "/sys/fs/bpf"] {
        let vol = volumes
            .iter()
            .find(|v| v["hostPath"]["path"] == host)
            .unwrap_or_else(|| panic!("no hostPath volume for {host}"));
        let mount = mounts
            .iter()
            .find(|m| m["name"] == vol["name"])
            .unwrap_or_else(|| panic!("volume for {host} is not mounted"));
        assert_eq!(mount["mountPath"], host);
        assert_eq!(mount["readOnly"], true, "{host} must be mounted read-only");
    }
}

#[test]
fn grafana_dashboard() {
    let dash: Value = serde_json::from_str(&read("grafana/ppscope-dashboard.json"))
        .expect("the dashboard is not valid JSON");
    assert!(
        dash["schemaVersion"].as_u64().unwrap_or(0) >= 36,
        "schemaVersion must be at least 36"
    );
    let vars = dash["templating"]["list"].as_array().expect("templating");
    assert!(
        vars.iter().any(|v| v["type"] == "datasource"
            && v["query"] == "prometheus"
            && v["name"] == "datasource"),
        "no Prometheus datasource variable named `datasource`"
    );
    let device = vars
        .iter()
        .find(|v| v["name"] == "device")
        .expect("no `device` variable");
    let device_query = device["query"]["query"].as_str().expect("device query");
    assert_known_metrics("variable device", device_query);

    let panels = dash["panels"].as_array().expect("panels");
    let mut ids = Vec::new();
    let mut exprs = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("panel title");
        ids.push(p["id"].as_u64().expect("panel id"));
        for k in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][k].is_u64(), "panel {title}: gridPos.{k}");
        }
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "panel {title} must use the datasource variable"
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert_known_metrics(&format!("panel {title}"), expr);
            exprs.push((title.to_string(), expr.to_string()));
        }
    }
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "panel ids must be unique");

    // Each required panel, and a metric it must show.
    let required = [
        ("Fast-path share", "ppscope_page_pool_alloc_total"),
        ("Ring full", "kind=\"ring_full\""),
        ("Slow-path", "ppscope_page_pool_slow_path_seconds_bucket"),
        (
            "Recommended vs current",
            "ppscope_page_pool_recommended_ring_size",
        ),
        ("Recommended vs current", "ppscope_page_pool_ring_size{"),
        ("Inflight bytes", "ppscope_page_pool_inflight_bytes"),
        ("NAPI full-budget", "ppscope_napi_full_budget_polls_total"),
        ("Drops by reason", "ppscope_drops_total"),
        ("BPF cost", "ppscope_bpf_run_seconds_total"),
        ("Events ppscope missed", "ppscope_skipped_runs_total"),
        ("Events ppscope missed", "ppscope_kprobe_missed_total"),
    ];
    for (title, needle) in required {
        assert!(
            exprs
                .iter()
                .any(|(t, e)| t.contains(title) && e.contains(needle)),
            "no panel titled `{title}…` querying `{needle}`"
        );
    }
    for (title, expr) in &exprs {
        if expr.contains("device") && !expr.contains("instance=~\"$instance\"") {
            panic!("panel {title}: not filtered by $instance: {expr}");
        }
        if expr.contains("ppscope_page_pool") && !expr.contains("device=~\"$device\"") {
            panic!("panel {title}: not filtered by $device: {expr}");
        }
    }

    // PromQL syntax: promtool parses each expression as a recording rule, with Grafana's
    // variables replaced by values.
    let dir = scratch("grafana");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, expr)) in exprs.iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*")
            .replace("$device", ".*");
        let expr = serde_json::to_string(&expr).unwrap();
        rules.push_str(&format!(
            "      - record: ppscope:dashboard:{i}\n        expr: {expr}\n"
        ));
    }
    let file = dir.join("dashboard-rules.yml");
    fs::write(&file, rules).unwrap();
    let out = run(
        "promtool",
        "prometheus",
        &["check", "rules", file.to_str().unwrap()],
        None,
    );
    assert!(
        out.status.success(),
        "a dashboard query is not valid PromQL:\n{}",
        output_text(&out)
    );
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn metric_name_scanner() {
    assert_eq!(
        metric_names("sum(rate(ppscope_drops_total{job=\"ppscope\"}[5m])) / ppscope_x:y"),
        ["ppscope_drops_total", "ppscope_x:y"]
    );
    assert!(known_metric("ppscope_devmem_dontneed_seconds_bucket"));
    assert!(known_metric("ppscope_page_pool_alloc_total"));
    assert!(!known_metric("ppscope_page_pool_slow_path_seconds"));
    assert!(!known_metric("ppscope_page_pool_alloc_total_bucket"));
    assert!(!known_metric("ppscope_x:y"));
    assert!(!known_metric("ppscope_devmem_dontneed_seconds"));
    assert!(!known_metric("ppscope_page_pool_ring_size_bucket"));
}
