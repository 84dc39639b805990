//! The job-workers overlay's KEDA ScaledObject, as `kubectl kustomize` renders it: valid
//! against KEDA's published CRD schema (vendored in tests/data/keda, see its README), and
//! consistent with the Deployment it scales and the config that Deployment runs — the
//! trigger reads the job-queue sink's own stream and consumer, the scale-down pace and
//! cool-down leave each stopping worker its whole shutdown, and a worker's own in-hand
//! jobs never count as a reason to add another.

use crate::deploy::{largest_shutdown_timeout_ms, render, repo, validator, yaml_docs};

use std::process::Command;

use serde_json::Value;

/// The rendered objects of the job-workers overlay.
fn job_workers() -> Vec<Value> {
    render("overlays/job-workers")
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in overlays/job-workers");
    found[0]
}

#[test]
fn scaled_object_passes_kedas_crd_schema_with_unknown_fields_refused() {
    let docs = job_workers();
    let objects: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ScaledObject")
        .collect();
    assert_eq!(objects.len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scaledobjects.json");
    std::fs::write(&file, serde_json::to_string(&objects).unwrap()).unwrap();
    let data = repo().join("tests/data/keda");
    let out = Command::new(validator().with_file_name("python3"))
        .arg(data.join("validate_crd.py"))
        .arg(data.join("keda.sh_scaledobjects.yaml"))
        .arg(&file)
        .output()
        .expect("run validate_crd.py");
    assert!(
        out.status.success(),
        "the ScaledObject does not pass KEDA's CRD schema:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The config the Deployment mounts, as JSON.
fn config_of(docs: &[Value], deployment: &Value) -> Value {
    let name = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|v| v["configMap"]["name"].as_str())
        .expect("the Deployment mounts a ConfigMap");
    let map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
        .expect("the ConfigMap it mounts");
    serde_json::from_str(map["data"]["jetsink.json"].as_str().expect("jetsink.json"))
        .expect("config json")
}

#[test]
fn scaled_object_scales_the_workers_on_their_job_queue_consumer() {
    let docs = job_workers();
    let so = &one(&docs, "ScaledObject")["spec"];
    let deployment = one(&docs, "Deployment");
    assert_eq!(so["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        so["scaleTargetRef"]["name"], deployment["metadata"]["name"],
        "the ScaledObject scales another Deployment than the overlay's"
    );
    assert!(
        deployment["spec"]["replicas"].is_null(),
        "a replicas field would reset KEDA's count at every apply"
    );

    let trigger = &so["triggers"][0];
    assert_eq!(trigger["type"], "nats-jetstream");
    let meta = &trigger["metadata"];
    for key in [
        "natsServerMonitoringEndpoint",
        "account",
        "stream",
        "consumer",
    ] {
        assert!(meta[key].is_string(), "trigger metadata {key}");
    }
    let config = config_of(&docs, deployment);
    let sinks = config["sinks"].as_object().expect("sinks");
    let (name, sink) = sinks
        .iter()
        .find(|(_, s)| {
            s["source"]["stream"] == meta["stream"] && s["source"]["consumer"] == meta["consumer"]
        })
        .expect("the trigger's stream and consumer are a sink's of the workers' config");
    assert!(
        sink["results"].is_object(),
        "sink {name}: KEDA scales competing workers, a job-queue sink (with `results`)"
    );

    // KEDA's lag counts delivered, unacknowledged jobs too. In job-queue mode a worker
    // holds the batch it writes and one pulled ahead; a threshold below that would add a
    // worker for jobs another worker already has in hand.
    let batch = sink["delivery"]["batch_size"].as_u64().unwrap_or(100);
    let threshold: u64 = meta["lagThreshold"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("lagThreshold, a number in a string");
    assert!(
        threshold > 2 * batch,
        "lagThreshold {threshold} is not above the {} jobs one worker holds",
        2 * batch
    );
    let min = so["minReplicaCount"].as_u64().expect("minReplicaCount");
    let max = so["maxReplicaCount"].as_u64().expect("maxReplicaCount");
    assert!(
        min >= 1,
        "with no worker, no MAX_DELIVERIES advisory is answered"
    );
    assert!(max > min, "minReplicaCount {min}, maxReplicaCount {max}");
}

#[test]
fn scale_down_and_cool_down_leave_each_stopping_worker_its_whole_shutdown() {
    let docs = job_workers();
    let so = &one(&docs, "ScaledObject")["spec"];
    let deployment = one(&docs, "Deployment");
    let config = config_of(&docs, deployment);
    let shutdown_ms = largest_shutdown_timeout_ms(&config);
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap_or(30);
    // jetsink exits at the latest shutdown_timeout_ms + 5 s after SIGTERM.
    assert!(
        grace * 1000 > shutdown_ms + 5_000,
        "terminationGracePeriodSeconds {grace} is not above {shutdown_ms} ms + 5 s"
    );
    let cooldown = so["cooldownPeriod"].as_u64().unwrap_or(300);
    assert!(
        cooldown >= grace,
        "cooldownPeriod {cooldown} below the grace period {grace}"
    );
    let down = &so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"];
    let policies = down["policies"].as_array().expect("scale-down policies");
    assert!(!policies.is_empty());
    for p in policies {
        assert_eq!(
            p["type"], "Pods",
            "{p}: remove workers by count, not percent"
        );
        assert_eq!(p["value"], 1, "{p}: one worker at a time");
        let period = p["periodSeconds"].as_u64().unwrap_or(0);
        assert!(
            period >= grace,
            "{p}: the next worker stops before the last one's grace period ({grace} s) ends"
        );
    }

    // One worker at the minimum must still be drainable off its node.
    let pdb = &one(&docs, "PodDisruptionBudget")["spec"];
    assert!(
        pdb["minAvailable"].is_null() && pdb["maxUnavailable"] == 1,
        "the workers' PodDisruptionBudget: {pdb}"
    );
}

/// The vendored CRD is the one the README names (version and checksum kept together).
#[test]
fn vendored_keda_crd_is_the_scaledobject_crd_its_readme_names() {
    let data = repo().join("tests/data/keda");
    let text = std::fs::read(data.join("keda.sh_scaledobjects.yaml")).unwrap();
    let crd = &yaml_docs(&text, "keda.sh_scaledobjects.yaml")[0];
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["spec"]["names"]["kind"], "ScaledObject");
    let readme = std::fs::read_to_string(data.join("README.md")).unwrap();
    let sha = Command::new("sha256sum")
        .arg(data.join("keda.sh_scaledobjects.yaml"))
        .output()
        .expect("sha256sum");
    let sum = String::from_utf8_lossy(&sha.stdout);
    let sum = sum.split_whitespace().next().unwrap_or_default();
    assert!(
        readme.contains(&format!("sha256: {sum}")),
        "tests/data/keda/README.md does not name the vendored file's checksum {sum}"
    );
}
