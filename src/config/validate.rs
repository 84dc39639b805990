//! Range and cross-field checks, and the normalization of both config shapes into [`Config`].
//!
//! Every rule pushes an [`Issue`] with its JSON path and keeps going, so an operator fixes
//! all mistakes in one edit instead of one per restart.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::Value;

use super::dead_letter::{self, DeadLetterConfig};
use super::destination::{self, DestinationConfig};
use super::metadata::{self, MessageMetadataConfig};
use super::randomizer;
use super::raw::{RawConfig, RawNats, RawSink};
use super::{Config, Issue, NatsConfig, SinkSpec, SourceConfig};
use crate::config::raw::{default_ack_wait_ms, default_max_ack_pending, minus_one, DeliveryConfig};

/// Most sinks one process runs; each holds a connection-level pull loop.
const MAX_SINKS: usize = 64;

struct Issues(Vec<Issue>);

impl Issues {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    fn range<T: PartialOrd + std::fmt::Display>(&mut self, path: String, v: T, lo: T, hi: T) {
        if v < lo || v > hi {
            self.push(path, format!("must be between {lo} and {hi}, got {v}"));
        }
    }
}

/// Checks a raw config and turns it into the model the daemon runs.
pub fn validate(raw: RawConfig) -> Result<Config, Vec<Issue>> {
    let mut issues = Issues(Vec::new());
    let RawConfig {
        nats,
        http,
        logging,
        sinks,
        delivery,
        sink,
        message_metadata,
        dead_letter,
    } = raw;

    let nats_cfg = check_nats(&nats, &mut issues);

    if http.enabled && http.listen.parse::<SocketAddr>().is_err() {
        issues.push(
            "http.listen",
            format!(
                "must be an address:port such as 127.0.0.1:9464, got {:?}",
                http.listen
            ),
        );
    }
    if !["trace", "debug", "info", "warn", "error"].contains(&logging.level.as_str()) {
        issues.push(
            "logging.level",
            format!(
                "must be one of trace, debug, info, warn, error, got {:?}",
                logging.level
            ),
        );
    }

    let mut specs = Vec::new();
    match (sinks, sink) {
        (Some(_), Some(_)) => issues.push(
            "",
            "use either `sinks` (multi-sink shape) or `sink` (single-sink shape), not both",
        ),
        (None, None) => issues.push(
            "",
            "no sink configured: add `sinks` (multi-sink shape) or `sink` with `nats.stream`, `nats.consumer` (single-sink shape)",
        ),
        (Some(map), None) => {
            for (key, path) in [
                ("delivery", delivery.is_some()),
                ("message_metadata", message_metadata.is_some()),
                ("dead_letter", dead_letter.is_some()),
            ] {
                if path {
                    issues.push(
                        key,
                        "top-level section belongs to the single-sink shape; with `sinks`, put it inside each sink",
                    );
                }
            }
            check_single_sink_keys_absent(&nats, &mut issues);
            if map.is_empty() {
                issues.push("sinks", "must name at least one sink");
            }
            if map.len() > MAX_SINKS {
                issues.push(
                    "sinks",
                    format!("at most {MAX_SINKS} sinks per process, got {}", map.len()),
                );
            }
            for (name, raw_sink) in map {
                let path = format!("sinks.{name}");
                check_sink_name(&name, &path, &mut issues);
                if let Some(spec) = check_sink(name, &path, raw_sink, &mut issues) {
                    specs.push(spec);
                }
            }
        }
        (None, Some(dest)) => {
            if let Some(spec) = single_sink(
                &nats,
                delivery.unwrap_or_default(),
                dest,
                message_metadata,
                dead_letter,
                &mut issues,
            ) {
                specs.push(spec);
            }
        }
    }
    check_conflicts(&specs, &mut issues);

    if issues.0.is_empty() {
        Ok(Config {
            nats: nats_cfg,
            http,
            logging,
            sinks: specs,
        })
    } else {
        Err(issues.0)
    }
}

fn check_nats(nats: &RawNats, issues: &mut Issues) -> NatsConfig {
    let servers = match (&nats.servers, &nats.url) {
        (Some(_), Some(_)) => {
            issues.push("nats.url", "give either `servers` or `url`, not both");
            Vec::new()
        }
        (Some(list), None) => {
            if list.is_empty() {
                issues.push("nats.servers", "must list at least one server URL");
            }
            list.clone()
        }
        (None, Some(url)) => vec![url.clone()],
        (None, None) => vec!["nats://127.0.0.1:4222".to_string()],
    };
    let base = if nats.url.is_some() {
        "nats.url"
    } else {
        "nats.servers"
    };
    for (i, s) in servers.iter().enumerate() {
        if s.parse::<async_nats::ServerAddr>().is_err() {
            let path = if nats.url.is_some() {
                base.to_string()
            } else {
                format!("{base}[{i}]")
            };
            issues.push(path, format!("not a NATS server URL: {s:?}"));
        }
    }
    if nats.name.is_empty() || nats.name.chars().any(char::is_control) {
        issues.push(
            "nats.name",
            "must be a non-empty name without control characters",
        );
    }
    issues.range(
        "nats.connect_timeout_ms".into(),
        nats.connect_timeout_ms,
        100,
        600_000,
    );
    issues.range(
        "nats.reconnect_delay_max_ms".into(),
        nats.reconnect_delay_max_ms,
        10,
        600_000,
    );
    issues.range(
        "nats.request_timeout_ms".into(),
        nats.request_timeout_ms,
        100,
        600_000,
    );
    if nats.password_env.is_some() && nats.user.is_none() {
        issues.push("nats.password_env", "needs `nats.user`");
    }
    let auth_kinds = [
        nats.password_env.is_some(),
        nats.token_env.is_some(),
        nats.creds_file.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if auth_kinds > 1 {
        issues.push(
            "nats",
            "choose one authentication method: password_env, token_env or creds_file",
        );
    }
    NatsConfig {
        servers,
        name: nats.name.clone(),
        connect_timeout_ms: nats.connect_timeout_ms,
        reconnect_delay_max_ms: nats.reconnect_delay_max_ms,
        max_reconnects: nats.max_reconnects,
        request_timeout_ms: nats.request_timeout_ms,
        user: nats.user.clone(),
        password_env: nats.password_env.clone(),
        token_env: nats.token_env.clone(),
        creds_file: nats.creds_file.clone().map(Into::into),
    }
}

fn check_single_sink_keys_absent(nats: &RawNats, issues: &mut Issues) {
    let present = [
        ("stream", nats.stream.is_some()),
        ("consumer", nats.consumer.is_some()),
        ("subject", nats.subject.is_some()),
        ("ack_wait_ms", nats.ack_wait_ms.is_some()),
        ("max_deliver", nats.max_deliver.is_some()),
        ("max_ack_pending", nats.max_ack_pending.is_some()),
        ("create_stream", nats.create_stream.is_some()),
    ];
    for (key, is) in present {
        if is {
            issues.push(
                format!("nats.{key}"),
                "belongs to the single-sink shape; with `sinks`, set it in each sink's `source`",
            );
        }
    }
}

fn single_sink(
    nats: &RawNats,
    delivery: DeliveryConfig,
    dest: Value,
    message_metadata: Option<MessageMetadataConfig>,
    dead_letter: Option<DeadLetterConfig>,
    issues: &mut Issues,
) -> Option<SinkSpec> {
    let stream = nats.stream.clone();
    let consumer = nats.consumer.clone();
    if stream.is_none() {
        issues.push("nats.stream", "required in the single-sink shape");
    }
    if consumer.is_none() {
        issues.push("nats.consumer", "required in the single-sink shape");
    }
    let source = SourceConfig {
        stream: stream.unwrap_or_default(),
        subjects: nats.subject.clone().into_iter().collect(),
        consumer: consumer.unwrap_or_default(),
        ack_wait_ms: nats.ack_wait_ms.unwrap_or_else(default_ack_wait_ms),
        max_deliver: nats.max_deliver.unwrap_or_else(minus_one),
        max_ack_pending: nats.max_ack_pending.unwrap_or_else(default_max_ack_pending),
        backoff_ms: Vec::new(),
        deliver_policy: Default::default(),
        create_stream: nats.create_stream.clone(),
        buckets: None,
    };
    let raw = RawSink {
        source,
        delivery,
        destination: dest,
        message_metadata,
        dead_letter,
        encryption: None,
        results: None,
    };
    // Paths in the single-sink shape are top-level: `delivery.x`, `sink.x`, `nats.stream`.
    check_sink_at("default".into(), SinkPaths::single(), raw, issues)
}

struct SinkPaths {
    source: String,
    stream: String,
    consumer: String,
    subjects: String,
    delivery: String,
    destination: String,
    section: String,
}

impl SinkPaths {
    fn multi(base: &str) -> SinkPaths {
        SinkPaths {
            source: format!("{base}.source"),
            stream: format!("{base}.source.stream"),
            consumer: format!("{base}.source.consumer"),
            subjects: format!("{base}.source.subjects"),
            delivery: format!("{base}.delivery"),
            destination: format!("{base}.destination"),
            section: base.to_string(),
        }
    }

    fn single() -> SinkPaths {
        SinkPaths {
            source: "nats".into(),
            stream: "nats.stream".into(),
            consumer: "nats.consumer".into(),
            subjects: "nats.subject".into(),
            delivery: "delivery".into(),
            destination: "sink".into(),
            section: String::new(),
        }
    }

    fn key(&self, k: &str) -> String {
        if self.section.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.section)
        }
    }
}

fn check_sink(name: String, base: &str, raw: RawSink, issues: &mut Issues) -> Option<SinkSpec> {
    check_sink_at(name, SinkPaths::multi(base), raw, issues)
}

fn check_sink_at(
    name: String,
    p: SinkPaths,
    raw: RawSink,
    issues: &mut Issues,
) -> Option<SinkSpec> {
    if let Some(dl) = &raw.dead_letter {
        issues
            .0
            .extend(dead_letter::validate(dl, &p.key("dead_letter")));
    }
    for (key, present) in [
        ("encryption", raw.encryption.is_some()),
        ("results", raw.results.is_some()),
    ] {
        if present {
            issues.push(p.key(key), "not supported yet by this version of jetsink");
        }
    }
    let d = &raw.delivery;
    let lanes_path = format!("{}.priority_lanes", p.delivery);
    issues
        .0
        .extend(metadata::validate_lanes(&d.priority_lanes, &lanes_path));
    let lane_subjects: Vec<(usize, &String)> = d
        .priority_lanes
        .lanes
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.subjects.iter().map(move |s| (i, s)))
        .collect();
    if !lane_subjects.is_empty() {
        if !d.priority_lanes.enabled {
            issues.push(
                format!("{lanes_path}.enabled"),
                "lanes[].subjects (per-lane consumer mode) needs enabled: true",
            );
        }
        if raw.source.buckets.is_some() {
            issues.push(
                format!("{}.buckets", p.source),
                "cannot be combined with lanes[].subjects (per-lane consumer mode)",
            );
        }
        if !raw.source.subjects.is_empty() {
            issues.push(
                p.subjects.clone(),
                "leave it empty in per-lane consumer mode: each lane subject gets its own consumer",
            );
        }
        let mut seen: Vec<&String> = Vec::new();
        for (i, lane) in d.priority_lanes.lanes.iter().enumerate() {
            let name = format!(
                "{}-lane-{}-{}",
                raw.source.consumer,
                lane.name,
                lane.subjects.len()
            );
            if name.len() > 255 {
                issues.push(
                    p.consumer.clone(),
                    format!("derived lane consumer names such as {name:?} exceed 255 characters"),
                );
            }
            if lane.subjects.is_empty() {
                issues.push(
                    format!("{lanes_path}.lanes[{i}].subjects"),
                    "in per-lane consumer mode every lane needs at least one subject",
                );
            }
            for (j, subj) in lane.subjects.iter().enumerate() {
                let path = format!("{lanes_path}.lanes[{i}].subjects[{j}]");
                if let Err(why) = check_subject(subj) {
                    issues.push(path, format!("{why}: {subj:?}"));
                } else if seen.contains(&subj) {
                    issues.push(path, format!("subject {subj:?} is listed in two lanes"));
                }
                seen.push(subj);
            }
        }
    }
    let metadata_path = p.key("message_metadata");
    if let Some(m) = &raw.message_metadata {
        issues
            .0
            .extend(metadata::validate_metadata(m, &metadata_path));
    }
    let effective = raw.message_metadata.clone().unwrap_or_default();
    issues.0.extend(metadata::validate_metadata_for_lanes(
        &effective,
        &metadata_path,
        &d.priority_lanes,
        &lanes_path,
    ));
    issues.0.extend(randomizer::validate_randomizer(
        &d.randomizer,
        &format!("{}.randomizer", p.delivery),
        d.batch_size,
    ));
    if d.randomizer.enabled && !d.randomizer.skip_startup_checks {
        // The same checks run against the live consumer at start-up; catching them here
        // lets `validate` report them offline.
        for problem in randomizer::check_consumer(
            &d.randomizer,
            d.batch_size,
            raw.source.max_ack_pending,
            raw.source.max_deliver,
            raw.source.ack_wait_ms,
            d.batch_timeout_ms,
        ) {
            issues.push(format!("{}.randomizer", p.delivery), problem);
        }
    }

    let s = &raw.source;
    check_name(&s.stream, &p.stream, "stream", issues);
    check_name(&s.consumer, &p.consumer, "consumer", issues);
    if s.subjects.len() > 1 {
        issues.push(
            p.subjects.clone(),
            format!(
                "one filter subject per sink (nats-server 2.9 ignores multiple filters), got {}",
                s.subjects.len()
            ),
        );
    }
    for (i, subj) in s.subjects.iter().enumerate() {
        let path = if p.section.is_empty() {
            p.subjects.clone()
        } else {
            format!("{}[{i}]", p.subjects)
        };
        if let Err(why) = check_subject(subj) {
            issues.push(path, format!("{why}: {subj:?}"));
        }
    }
    issues.range(
        format!("{}.ack_wait_ms", p.source),
        s.ack_wait_ms,
        1_000,
        43_200_000,
    );
    if s.max_deliver == 0 || s.max_deliver < -1 {
        issues.push(
            format!("{}.max_deliver", p.source),
            format!(
                "must be -1 (unlimited) or at least 1, got {}",
                s.max_deliver
            ),
        );
    }
    if s.max_ack_pending != -1 && s.max_ack_pending < d.batch_size as i64 {
        issues.push(
            format!("{}.max_ack_pending", p.source),
            format!(
                "must be -1 (unlimited) or at least delivery.batch_size ({}), got {}",
                d.batch_size, s.max_ack_pending
            ),
        );
    }
    if !s.backoff_ms.is_empty() {
        if s.max_deliver != -1 && s.backoff_ms.len() as i64 >= s.max_deliver {
            issues.push(
                format!("{}.backoff_ms", p.source),
                format!(
                    "needs fewer steps ({}) than max_deliver ({})",
                    s.backoff_ms.len(),
                    s.max_deliver
                ),
            );
        }
        for (i, b) in s.backoff_ms.iter().enumerate() {
            issues.range(format!("{}.backoff_ms[{i}]", p.source), *b, 1, 43_200_000);
        }
    }
    if let Some(b) = &s.buckets {
        let path = format!("{}.buckets", p.source);
        issues.0.extend(randomizer::validate_buckets(b, &path));
        issues.0.extend(randomizer::validate_bucket_consumer(
            &s.consumer,
            b.count,
            &p.consumer,
        ));
        let wildcard = randomizer::bucket_wildcard(&b.prefix);
        if !s.subjects.is_empty() && s.subjects != [wildcard.clone()] {
            issues.push(
                p.subjects.clone(),
                format!("with buckets, leave it empty or set it to {wildcard:?} (each bucket consumer filters its own subject)"),
            );
        }
    }
    if let Some(cs) = &s.create_stream {
        let base = format!("{}.create_stream", p.source);
        let per_lane = d
            .priority_lanes
            .lanes
            .iter()
            .any(|l| !l.subjects.is_empty());
        if cs.subjects.is_empty() && s.subjects.is_empty() && s.buckets.is_none() && !per_lane {
            issues.push(
                format!("{base}.subjects"),
                "needed when the source has no filter subject",
            );
        }
        for (i, subj) in cs.subjects.iter().enumerate() {
            if let Err(why) = check_subject(subj) {
                issues.push(format!("{base}.subjects[{i}]"), format!("{why}: {subj:?}"));
            }
        }
        issues.range(format!("{base}.replicas"), cs.replicas, 1, 5);
        issues.range(
            format!("{base}.duplicate_window_ms"),
            cs.duplicate_window_ms,
            0,
            604_800_000,
        );
        if cs.max_age_ms != 0 && cs.duplicate_window_ms > cs.max_age_ms {
            issues.push(
                format!("{base}.duplicate_window_ms"),
                format!(
                    "must not exceed max_age_ms ({}), got {}",
                    cs.max_age_ms, cs.duplicate_window_ms
                ),
            );
        }
    }

    issues.range(
        format!("{}.batch_size", p.delivery),
        d.batch_size,
        1,
        10_000,
    );
    issues.range(
        format!("{}.max_batch_bytes", p.delivery),
        d.max_batch_bytes,
        1_024,
        64 * 1024 * 1024,
    );
    issues.range(
        format!("{}.batch_timeout_ms", p.delivery),
        d.batch_timeout_ms,
        10,
        60_000,
    );
    if d.batch_timeout_ms >= s.ack_wait_ms {
        issues.push(
            format!("{}.batch_timeout_ms", p.delivery),
            format!(
                "must be below the source's ack_wait_ms ({}), got {}",
                s.ack_wait_ms, d.batch_timeout_ms
            ),
        );
    }
    issues.range(
        format!("{}.shutdown_timeout_ms", p.delivery),
        d.shutdown_timeout_ms,
        0,
        600_000,
    );
    let r = &d.retry;
    issues.range(
        format!("{}.retry.initial_backoff_ms", p.delivery),
        r.initial_backoff_ms,
        1,
        60_000,
    );
    if r.max_backoff_ms < r.initial_backoff_ms || r.max_backoff_ms > 3_600_000 {
        issues.push(
            format!("{}.retry.max_backoff_ms", p.delivery),
            format!(
                "must be between initial_backoff_ms ({}) and 3600000, got {}",
                r.initial_backoff_ms, r.max_backoff_ms
            ),
        );
    }
    if !(1.0..=10.0).contains(&r.multiplier) {
        issues.push(
            format!("{}.retry.multiplier", p.delivery),
            format!("must be between 1.0 and 10.0, got {}", r.multiplier),
        );
    }

    let destination = match destination::parse(&p.destination, raw.destination) {
        Ok(d) => {
            check_destination(&d, &p.destination, issues);
            Some(d)
        }
        Err(issue) => {
            issues.0.push(issue);
            None
        }
    };
    destination.map(|destination| SinkSpec {
        name,
        source: raw.source,
        delivery: raw.delivery,
        metadata: raw.message_metadata,
        dead_letter: raw.dead_letter,
        destination,
    })
}

fn check_destination(d: &DestinationConfig, path: &str, issues: &mut Issues) {
    match d {
        DestinationConfig::Sqlite(c) => {
            if c.path.trim().is_empty() {
                issues.push(format!("{path}.path"), "must not be empty");
            }
            if !is_identifier(&c.table) {
                issues.push(
                    format!("{path}.table"),
                    format!(
                        "must be letters, digits and `_`, not starting with a digit, at most 63 characters, got {:?}",
                        c.table
                    ),
                );
            }
            issues.range(
                format!("{path}.busy_timeout_ms"),
                c.busy_timeout_ms,
                0,
                600_000,
            );
        }
        DestinationConfig::File(c) => {
            if c.directory.trim().is_empty() {
                issues.push(format!("{path}.directory"), "must not be empty");
            }
            if c.rotate_bytes != 0 && c.rotate_bytes < 4_096 {
                issues.push(
                    format!("{path}.rotate_bytes"),
                    format!("must be 0 (never) or at least 4096, got {}", c.rotate_bytes),
                );
            }
            if c.rotate_interval_ms != 0 && c.rotate_interval_ms < 1_000 {
                issues.push(
                    format!("{path}.rotate_interval_ms"),
                    format!(
                        "must be 0 (never) or at least 1000, got {}",
                        c.rotate_interval_ms
                    ),
                );
            }
            let ok = !c.prefix.is_empty()
                && c.prefix.len() <= 64
                && c.prefix
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
            if !ok {
                issues.push(
                    format!("{path}.prefix"),
                    format!(
                        "must be 1-64 letters, digits, `_` or `-`, got {:?}",
                        c.prefix
                    ),
                );
            }
        }
        DestinationConfig::Postgres(c) => {
            for (key, message) in c.problems() {
                issues.push(format!("{path}.{key}"), message);
            }
        }
        DestinationConfig::Mysql(c) => {
            for (key, message) in c.problems() {
                issues.push(format!("{path}.{key}"), message);
            }
        }
    }
}

/// Two sinks must not share a durable consumer or a destination: they would steal each
/// other's messages or interleave writes to one file.
fn check_conflicts(specs: &[SinkSpec], issues: &mut Issues) {
    let mut consumers: BTreeMap<(String, String), &str> = BTreeMap::new();
    let mut targets: BTreeMap<String, &str> = BTreeMap::new();
    for s in specs {
        let key = (s.source.stream.clone(), s.source.consumer.clone());
        if let Some(other) = consumers.insert(key, &s.name) {
            issues.push(
                format!("sinks.{}.source.consumer", s.name),
                format!(
                    "sink `{other}` already reads stream {} with consumer {}",
                    s.source.stream, s.source.consumer
                ),
            );
        }
        let target = match &s.destination {
            DestinationConfig::Sqlite(c) => format!("sqlite:{}#{}", c.path, c.table),
            DestinationConfig::File(c) => format!("file:{}/{}", c.directory, c.prefix),
            DestinationConfig::Postgres(c) => c.target(),
            DestinationConfig::Mysql(c) => c.target(),
        };
        if let Some(other) = targets.insert(target, &s.name) {
            issues.push(
                format!("sinks.{}.destination", s.name),
                format!("sink `{other}` already writes to the same destination"),
            );
        }
    }
}

fn check_sink_name(name: &str, path: &str, issues: &mut Issues) {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        issues.push(
            path,
            "sink names must be 1-64 letters, digits, `_` or `-` (they become metric labels)",
        );
    }
}

/// Stream and consumer names: no whitespace, `.`, `*`, `>`, path separators or controls.
fn check_name(name: &str, path: &str, what: &str, issues: &mut Issues) {
    if name.is_empty() {
        issues.push(path, format!("{what} name must not be empty"));
        return;
    }
    if !is_valid_name(name) {
        issues.push(
            path,
            format!(
                "{what} name must be at most 255 characters without spaces, `.`, `*`, `>`, `/` or `\\`, got {name:?}"
            ),
        );
    }
}

/// A stream or consumer name the server accepts: 1 to 255 characters without whitespace,
/// control characters, `.`, `*`, `>`, `/` or `\`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        })
}

/// A NATS subject or filter: dot-separated non-empty tokens; `*` is a whole token; `>` only
/// as the last token.
pub fn check_subject(subject: &str) -> Result<(), &'static str> {
    if subject.is_empty() {
        return Err("subject must not be empty");
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("subject must not contain whitespace");
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err("subject has an empty token");
        }
        if t.contains('>') && (*t != ">" || i != tokens.len() - 1) {
            return Err("`>` must be the whole last token");
        }
        if t.contains('*') && *t != "*" {
            return Err("`*` must be a whole token");
        }
    }
    Ok(())
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    s.len() <= 63 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn errors(text: &str) -> Vec<String> {
        match Config::from_json_str(text) {
            Ok(_) => Vec::new(),
            Err(issues) => issues.iter().map(|i| i.to_string()).collect(),
        }
    }

    const MINIMAL: &str = r#"{
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
        "sinks": {"orders": {
            "source": {"stream": "ORDERS", "subjects": "orders.>", "consumer": "jetsink"},
            "destination": {"type": "sqlite", "path": "data/o.db"}
        }}
    }"#;

    #[test]
    fn minimal_multi_sink_config_loads_with_defaults() {
        let cfg = Config::from_json_str(MINIMAL).unwrap();
        let s = &cfg.sinks[0];
        assert_eq!(s.name, "orders");
        assert_eq!(s.delivery.batch_size, 500);
        assert_eq!(s.source.subjects, vec!["orders.>"]);
        assert_eq!(cfg.http.listen, "127.0.0.1:9464");
    }

    #[test]
    fn zero_batch_size_names_its_path_and_range() {
        let text = MINIMAL.replace(
            r#""destination""#,
            r#""delivery": {"batch_size": 0}, "destination""#,
        );
        let errs = errors(&text);
        assert!(
            errs.contains(
                &"sinks.orders.delivery.batch_size: must be between 1 and 10000, got 0".to_string()
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn unknown_key_names_its_path() {
        let text = MINIMAL.replace(
            r#""consumer": "jetsink""#,
            r#""consumer": "jetsink", "bogus": 1"#,
        );
        let errs = errors(&text);
        assert!(errs[0].starts_with("sinks.orders.source"), "{errs:?}");
        assert!(errs[0].contains("unknown field `bogus`"), "{errs:?}");
    }

    #[test]
    fn wrong_type_names_its_path() {
        let text = MINIMAL.replace(
            r#""destination""#,
            r#""delivery": {"batch_size": "many"}, "destination""#,
        );
        let errs = errors(&text);
        assert!(
            errs[0].starts_with("sinks.orders.delivery.batch_size: invalid type"),
            "{errs:?}"
        );
    }

    #[test]
    fn unknown_key_inside_destination_names_its_path() {
        let text = MINIMAL.replace(
            r#""path": "data/o.db""#,
            r#""path": "data/o.db", "fsync": true"#,
        );
        let errs = errors(&text);
        assert!(errs[0].starts_with("sinks.orders.destination"), "{errs:?}");
        assert!(errs[0].contains("unknown field `fsync`"), "{errs:?}");
    }

    #[test]
    fn duplicate_key_is_an_error() {
        let text = MINIMAL.replace(
            r#""consumer": "jetsink""#,
            r#""consumer": "a", "consumer": "b""#,
        );
        let errs = errors(&text);
        assert!(
            errs[0].contains("sinks.orders.source.consumer: duplicate key"),
            "{errs:?}"
        );
    }

    #[test]
    fn every_problem_is_reported_not_just_the_first() {
        let text = MINIMAL.replace(
            r#""destination""#,
            r#""delivery": {"batch_size": 0, "batch_timeout_ms": 5, "retry": {"multiplier": 50.0}}, "destination""#,
        );
        assert_eq!(errors(&text).len(), 3, "{:?}", errors(&text));
    }

    #[test]
    fn planned_sections_are_refused_not_ignored() {
        let text = MINIMAL.replace(
            r#""destination""#,
            r#""encryption": {}, "results": {}, "destination""#,
        );
        let errs = errors(&text);
        assert!(
            errs.iter()
                .any(|e| e
                    == "sinks.orders.encryption: not supported yet by this version of jetsink"),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("sinks.orders.results: not supported yet")),
            "{errs:?}"
        );
    }

    #[test]
    fn single_sink_shape_runs_as_sink_named_default() {
        let cfg = Config::from_json_str(
            r#"{"nats": {"url": "nats://127.0.0.1:4222", "stream": "EVENTS", "consumer": "c", "subject": "events.>"},
                "delivery": {"batch_size": 100},
                "sink": {"type": "file", "directory": "data/x"}}"#,
        )
        .unwrap();
        assert_eq!(cfg.sinks.len(), 1);
        assert_eq!(cfg.sinks[0].name, "default");
        assert_eq!(cfg.sinks[0].delivery.batch_size, 100);
        assert_eq!(cfg.sinks[0].source.subjects, vec!["events.>"]);
    }

    #[test]
    fn single_sink_errors_use_top_level_paths() {
        let errs = errors(
            r#"{"nats": {"url": "nats://127.0.0.1:4222", "stream": "EVENTS"},
                "delivery": {"batch_size": 0},
                "sink": {"type": "file", "rotate_bytes": 10}}"#,
        );
        assert!(
            errs.contains(&"nats.consumer: required in the single-sink shape".to_string()),
            "{errs:?}"
        );
        assert!(
            errs.contains(&"delivery.batch_size: must be between 1 and 10000, got 0".to_string()),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.starts_with("sink.rotate_bytes:")),
            "{errs:?}"
        );
    }

    #[test]
    fn unsupported_and_unknown_destination_types_differ() {
        let pg = errors(&MINIMAL.replace(r#""type": "sqlite""#, r#""type": "http""#));
        assert!(pg[0].contains("not supported yet"), "{pg:?}");
        let bogus = errors(&MINIMAL.replace(r#""type": "sqlite""#, r#""type": "tape""#));
        assert!(
            bogus[0].contains("unknown destination type `tape`"),
            "{bogus:?}"
        );
    }

    #[test]
    fn two_sinks_on_one_consumer_conflict() {
        let errs = errors(
            r#"{"nats": {}, "sinks": {
                "a": {"source": {"stream": "S", "consumer": "c"}, "destination": {"type": "file", "directory": "d1"}},
                "b": {"source": {"stream": "S", "consumer": "c"}, "destination": {"type": "file", "directory": "d2"}}}}"#,
        );
        assert!(
            errs.iter().any(|e| e.contains("already reads stream S")),
            "{errs:?}"
        );
    }

    #[test]
    fn subject_rules() {
        assert!(check_subject("a.b.>").is_ok());
        assert!(check_subject("a.*.c").is_ok());
        assert!(check_subject("a.>.c").is_err());
        assert!(check_subject("a..b").is_err());
        assert!(check_subject("a.b*").is_err());
        assert!(check_subject("a b").is_err());
    }

    #[test]
    fn max_ack_pending_below_batch_size_is_refused() {
        let text = MINIMAL.replace(
            r#""consumer": "jetsink""#,
            r#""consumer": "jetsink", "max_ack_pending": 10"#,
        );
        let errs = errors(&text);
        assert!(
            errs[0].starts_with("sinks.orders.source.max_ack_pending: must be -1"),
            "{errs:?}"
        );
    }
}
