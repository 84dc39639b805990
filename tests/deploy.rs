//! The deployment files are checked like code: each kustomization under deploy/kubernetes
//! (the overlays of the base, the StatefulSet) is rendered with `kubectl kustomize`, every
//! object it renders passes the API schemas (offline, with PyPI `kubernetes-validate`),
//! their configs pass `jetsink validate` and get every secret they name from a Secret, and
//! every metric the Grafana dashboard and the Prometheus rules use is one the daemon
//! exports. The KEDA ScaledObject is checked in tests/keda.rs.
//!
//! `kubernetes-validate` is looked up in `.ci/venv` (where `.ci/run` installs it) or at
//! `$JETSINK_KUBERNETES_VALIDATE`; without it the Kubernetes tests fail and print the
//! install command. Its Python (which has PyYAML) also turns the manifests into JSON.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use jetsink::dlq::Reason;
use jetsink::metrics::Metrics;
use serde_json::Value;

const INSTALL: &str = "python3 -m venv .ci/venv && .ci/venv/bin/pip install kubernetes-validate==1.37.0 (or run .ci/run)";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The validator, or a failure that says how to install it.
pub fn validator() -> PathBuf {
    let path = std::env::var_os("JETSINK_KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".ci/venv/bin/kubernetes-validate"));
    assert!(
        path.is_file(),
        "kubernetes-validate not found at {}; install it: {INSTALL}",
        path.display()
    );
    path
}

/// What can be deployed from deploy/kubernetes, each a kustomization: the two overlays of
/// the base, and the single-writer StatefulSet.
pub const KUSTOMIZATIONS: [&str; 3] = ["overlays/sink", "overlays/job-workers", "statefulset"];

/// Kinds that are CRDs, whose schemas kubernetes-validate does not bundle: the
/// ServiceMonitor is checked against the Service below, the ScaledObject against KEDA's
/// vendored CRD (tests/keda.rs).
const CRD_KINDS: [&str; 2] = ["ServiceMonitor", "ScaledObject"];

/// kubectl, whose `kustomize` renders the overlays (the machine image ships it, with
/// kustomize v5), or `$JETSINK_KUBECTL`.
fn kubectl() -> PathBuf {
    std::env::var_os("JETSINK_KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// YAML documents as JSON values, through the validator's Python and PyYAML.
pub fn yaml_docs(yaml: &[u8], what: &str) -> Vec<Value> {
    let python = validator().with_file_name("python3");
    let mut child = Command::new(&python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3 with PyYAML");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(yaml).unwrap();
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Every object `kubectl kustomize` renders for one kustomization under deploy/kubernetes.
pub fn render(kustomization: &str) -> Vec<Value> {
    let dir = repo().join("deploy/kubernetes").join(kustomization);
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("run kubectl kustomize (kubectl, or $JETSINK_KUBECTL): {e}"));
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = yaml_docs(&out.stdout, kustomization);
    assert!(!docs.is_empty(), "{kustomization} renders nothing");
    docs
}

/// Every rendered object, with the kustomization it came from (in messages as its "file").
fn manifests() -> Vec<(PathBuf, Value)> {
    KUSTOMIZATIONS
        .iter()
        .flat_map(|k| render(k).into_iter().map(move |d| (PathBuf::from(k), d)))
        .collect()
}

/// Every `.yaml` file under `dir`, sorted.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("deploy/kubernetes").flatten() {
        let p = entry.path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml") {
            out.push(p);
        }
    }
}

/// The files a kustomization.yaml names: resources (directories followed), patches and
/// configurations.
fn named_files(kustomization_dir: &Path, out: &mut BTreeSet<PathBuf>) {
    let file = kustomization_dir.join("kustomization.yaml");
    out.insert(file.canonicalize().unwrap_or(file.clone()));
    let text = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let k = &yaml_docs(&text, &file.display().to_string())[0];
    let listed = k["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(k["configurations"].as_array().into_iter().flatten())
        .chain(
            k["patches"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| &p["path"]),
        )
        .filter_map(Value::as_str);
    for name in listed {
        let path = kustomization_dir.join(name);
        if path.is_dir() {
            named_files(&path, out);
        } else {
            out.insert(path.canonicalize().unwrap_or(path));
        }
    }
}

#[test]
fn every_manifest_file_is_part_of_a_kustomization_that_is_rendered_and_checked() {
    let root = repo().join("deploy/kubernetes");
    let mut named = BTreeSet::new();
    for k in KUSTOMIZATIONS {
        named_files(&root.join(k).canonicalize().expect(k), &mut named);
    }
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    files.sort();
    let stray: Vec<String> = files
        .iter()
        .filter(|f| !named.contains(&f.canonicalize().unwrap()))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        stray.is_empty(),
        "in deploy/kubernetes but in no rendered kustomization: {stray:?}"
    );
}

#[test]
fn every_rendered_object_passes_the_api_schemas_offline_except_the_crds() {
    let validator = validator();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (i, (from, doc)) in manifests().iter().enumerate() {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if CRD_KINDS.contains(&kind) {
            continue;
        }
        let name = format!(
            "{i:02}-{}-{kind}.json",
            from.display().to_string().replace('/', "-")
        );
        std::fs::write(dir.path().join(&name), doc.to_string()).unwrap();
        files.push(dir.path().join(name));
    }
    assert!(files.len() >= 10, "{files:?}");
    let out = Command::new(&validator)
        .args(["--strict", "--quiet"])
        .args(&files)
        .output()
        .expect("run kubernetes-validate");
    assert!(
        out.status.success(),
        "kubernetes-validate failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every value of a key ending in `_env`, anywhere in a config.
fn env_names(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) if k.ends_with("_env") => {
                        out.insert(s.clone());
                    }
                    _ => env_names(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| env_names(i, out)),
        _ => {}
    }
}

#[test]
fn each_workload_runs_a_valid_config_with_its_secrets_from_secret_refs_non_root_and_probed() {
    let docs = manifests();
    let dir = tempfile::tempdir().unwrap();
    let configs: BTreeMap<String, Value> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "ConfigMap")
        .map(|(file, d)| {
            let name = d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let text = d["data"]["jetsink.json"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: no data.jetsink.json", file.display()));
            let path = dir.path().join(format!("{name}.json"));
            std::fs::write(&path, text).unwrap();
            let (code, out, err) = common::jetsink(
                &["validate", "--config", path.to_str().unwrap()],
                dir.path(),
            );
            assert_eq!(code, 0, "{}: jetsink validate: {out}{err}", file.display());
            (name, serde_json::from_str(text).expect("config json"))
        })
        .collect();
    let workloads: Vec<&(PathBuf, Value)> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "Deployment" || d["kind"] == "StatefulSet")
        .collect();
    assert!(workloads.iter().any(|(_, d)| d["kind"] == "Deployment"));
    assert!(workloads.iter().any(|(_, d)| d["kind"] == "StatefulSet"));
    for (file, w) in workloads {
        let at = file.display();
        let pod = &w["spec"]["template"]["spec"];
        let config_name = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|v| v["configMap"]["name"].as_str())
            .unwrap_or_else(|| panic!("{at}: mounts no ConfigMap"));
        let config = &configs[config_name];
        let c = &pod["containers"][0];

        let mut wanted = BTreeSet::new();
        env_names(config, &mut wanted);
        assert!(!wanted.is_empty(), "{at}: its config names no secret");
        for name in &wanted {
            let entry = c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["name"] == name.as_str())
                .unwrap_or_else(|| {
                    panic!("{at}: the config reads {name}, the container does not set it")
                });
            assert!(
                entry["valueFrom"]["secretKeyRef"]["name"].is_string(),
                "{at}: {name} must come from a Secret: {entry}"
            );
        }

        // The grace period outlasts jetsink's own bound: the largest shutdown timeout + 5 s.
        let largest_ms = largest_shutdown_timeout_ms(config);
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        assert!(
            grace * 1000 > largest_ms + 5_000,
            "{at}: terminationGracePeriodSeconds {grace} is not above {largest_ms} ms + 5 s"
        );

        let listen = config["http"]["listen"].as_str().unwrap_or_default();
        let port: u64 = listen
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        assert!(
            listen.starts_with("0.0.0.0:"),
            "{at}: http.listen {listen} is not reachable by the kubelet"
        );
        assert_eq!(c["ports"][0]["containerPort"], port, "{at}: container port");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{at}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{at}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{at}");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{at}");
        assert_eq!(
            c["securityContext"]["allowPrivilegeEscalation"], false,
            "{at}"
        );
        assert!(
            c["resources"]["limits"]["memory"].is_string(),
            "{at}: memory limit"
        );

        let kinds: BTreeSet<&str> = config["sinks"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, s)| s["destination"]["type"].as_str())
            .collect();
        if w["kind"] == "StatefulSet" {
            // One writer per file or SQLite destination.
            assert_eq!(w["spec"]["replicas"], 1, "{at}");
            assert!(
                w["spec"]["volumeClaimTemplates"][0].is_object(),
                "{at}: a PVC"
            );
        } else {
            assert!(
                kinds.iter().all(|k| *k != "file" && *k != "sqlite"),
                "{at}: a Deployment runs replicas side by side; file/SQLite need the StatefulSet"
            );
        }
    }

    // The ServiceMonitor (a CRD, not schema-checked) must select a Service by its labels
    // and name one of its ports.
    let services: Vec<&Value> = docs
        .iter()
        .map(|(_, d)| d)
        .filter(|d| d["kind"] == "Service")
        .collect();
    for (file, m) in docs.iter().filter(|(_, d)| d["kind"] == "ServiceMonitor") {
        let at = file.display();
        assert_eq!(m["apiVersion"], "monitoring.coreos.com/v1", "{at}");
        let wanted = m["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap_or_else(|| panic!("{at}: selector.matchLabels"));
        let service = services
            .iter()
            .find(|s| wanted.iter().all(|(k, v)| &s["metadata"]["labels"][k] == v))
            .unwrap_or_else(|| panic!("{at}: selects no Service"));
        for e in m["spec"]["endpoints"].as_array().into_iter().flatten() {
            assert!(
                service["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["name"] == e["port"]),
                "{at}: port {} is not a port of the Service",
                e["port"]
            );
        }
    }
}

/// Every reason label of the dead-letter counter; the match fails to compile when a
/// reason is added and not listed.
fn every_reason() -> Vec<Reason> {
    let all = [
        Reason::Metadata,
        Reason::Lane,
        Reason::Destination,
        Reason::LastDelivery,
        Reason::MaxDeliveries,
        Reason::Malformed,
    ];
    for r in all {
        match r {
            Reason::Metadata
            | Reason::Lane
            | Reason::Destination
            | Reason::LastDelivery
            | Reason::MaxDeliveries
            | Reason::Malformed => {}
        }
    }
    all.to_vec()
}

/// The sample names `/metrics` serves once every family has a child, as `jetsink run`
/// creates them: labelled families only appear once labelled, so each is labelled here the
/// way the daemon does (per sink, per connection, per consumer, per dead-letter reason).
fn exported_names() -> BTreeSet<String> {
    let m = Metrics::new();
    let sink = jetsink::pipeline::SinkMetrics::new(&m, "s");
    for r in every_reason() {
        sink.dlq.published(r);
    }
    sink.pinned();
    jetsink::nats::ConnectionMetrics::new(&m, "c");
    jetsink::nats::Links::new(&m);
    jetsink::listener::ListenerMetrics::register(m.registry()).unwrap();
    let api = jetsink::api::ApiMetrics::register(m.registry()).unwrap();
    api.init_sink("s");
    api.waited("s", jetsink::api::metrics::Outcome::Committed, 0.1);
    api.responded("s", 200);
    let backlog = jetsink::nats::backlog::BacklogGauges::register(m.registry()).unwrap();
    backlog.consumer("s", "c");
    jetsink::metrics_snapshot::register(&m);
    jetsink::telemetry::register_metrics(&m, "s");
    jetsink::health::Health::exporting(&m).sink("s");
    jetsink::daemon::ReloadMetrics::new(&m);
    let mut names = BTreeSet::new();
    for line in m.render().lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            names.insert(name.to_string());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    names
}

/// Every `jetsink_…` identifier in `text`.
fn metric_names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("jetsink_") {
        let before = rest[..i].chars().last();
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// Every `expr` string in a Grafana dashboard.
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) if k == "expr" || k == "definition" => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| exprs(i, out)),
        _ => {}
    }
}

/// The metric names docs/operations.md documents in its metrics table.
fn documented_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("| `jetsink_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("jetsink_{n}"))
        .collect()
}

#[test]
fn every_exported_metric_is_documented_and_every_documented_one_is_exported() {
    let exported: BTreeSet<String> = exported_names()
        .into_iter()
        .filter(|n| !["_bucket", "_sum", "_count"].iter().any(|s| n.ends_with(s)))
        .collect();
    let documented = documented_names();
    assert!(documented.len() > 40, "{documented:?}");
    let undocumented: Vec<&String> = exported.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "exported but not in docs/operations.md's metrics table: {undocumented:?}"
    );
    let gone: Vec<&String> = documented.difference(&exported).collect();
    assert!(
        gone.is_empty(),
        "documented in docs/operations.md but not exported: {gone:?}"
    );
}

#[test]
fn every_metric_the_dashboard_and_alert_rules_name_is_one_the_daemon_exports() {
    let exported = exported_names();
    // The families the dashboard is meant to show, so an empty dashboard cannot pass.
    for family in [
        "jetsink_messages_acked_total",
        "jetsink_commit_lag_seconds_bucket",
        "jetsink_sink_write_seconds_bucket",
        "jetsink_inflight_messages",
        "jetsink_dlq_published_total",
        "jetsink_current_priority_lanes_active",
        "jetsink_randomizer_window",
        "jetsink_nats_reconnects_total",
        "jetsink_consumer_pending_messages",
    ] {
        assert!(exported.contains(family), "{family} is not exported at all");
    }

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/jetsink.json")).unwrap(),
    )
    .expect("deploy/grafana/jetsink.json is JSON");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    let used = metric_names_in(&queries.join("\n"));
    for family in [
        "jetsink_messages_acked_total",
        "jetsink_commit_lag_seconds_bucket",
        "jetsink_sink_write_seconds_bucket",
        "jetsink_inflight_messages",
        "jetsink_dlq_published_total",
        "jetsink_current_priority_lanes_active",
        "jetsink_randomizer_window",
        "jetsink_nats_reconnects_total",
        "jetsink_consumer_pending_messages",
    ] {
        assert!(
            used.contains(family),
            "the dashboard does not show {family}"
        );
    }
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "deploy/grafana/jetsink.json uses metrics jetsink does not export: {unknown:?}"
    );

    // The whole rules file, descriptions included: an operator follows those names too.
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus-rules.yml")).unwrap();
    let used = metric_names_in(&rules);
    assert!(used.len() > 5, "{used:?}");
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "deploy/prometheus-rules.yml names metrics jetsink does not export: {unknown:?}"
    );
}

/// The largest `delivery.shutdown_timeout_ms` of a config's sinks (10 s, the default, where a
/// sink does not set it): what a pod's grace period and KEDA's scale-down pace must outlast.
pub fn largest_shutdown_timeout_ms(config: &Value) -> u64 {
    config["sinks"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, s)| {
            s["delivery"]["shutdown_timeout_ms"]
                .as_u64()
                .unwrap_or(10_000)
        })
        .max()
        .unwrap_or(10_000)
}
