//! The operator's kit in `ops/` against the library: the Grafana dashboard
//! parses as JSON and the alert rules as YAML, every query in them names only
//! metrics that `lock_runtime::metric_names` exports and labels (and label
//! values) that the library sets on them, and the dashboard shows every
//! metric. A metric renamed, removed or added fails here, not in someone's
//! Grafana. No Redis needed.
//!
//! serde_json reads the dashboard (with no key repeated in an object) and
//! yaml_serde the rules, into structs that reject a key Prometheus does not
//! know; PromQL is checked here down to its tokens, brackets and selectors.
//! `promtool check rules ops/prometheus/alerts.yml` is the full check of the
//! PromQL; this one knows what the library records.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use lock_runtime::metric_names;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

const DASHBOARD: &str = "ops/grafana/lock-runtime.json";
const ALERTS: &str = "ops/prometheus/alerts.yml";
const README: &str = "ops/README.md";

// What the library records, read off lock-runtime/src/base/telemetry.rs.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Counter,
    Gauge,
    Histogram,
}

/// A label the library sets, with every value it gives it.
type Label = (&'static str, &'static [&'static str]);

struct Metric {
    name: &'static str,
    ty: Type,
    labels: &'static [Label],
}

/// `kind_label`: `LockKind::as_str` (base/kind.rs), but for the two sides
/// of a read-write lock, `read` and `write`.
const KIND: Label = ("kind", &["exclusive", "fair", "semaphore", "read", "write"]);
/// `cause` in `Acquiring::finish`.
const CAUSE: Label = ("cause", &["held", "restart_quarantine"]);
/// `reason_label`.
const REASON: Label = (
    "reason",
    &[
        "not_held",
        "expired",
        "not_held_at_release",
        "not_held_at_reentry",
        "lease_ended",
        "shut_down",
        "max_hold",
    ],
);
/// `acquire` in `Acquiring::finish`, `release` in `Hold::end`, `renew` in
/// `renewal`.
const OPERATION: Label = ("operation", &["acquire", "release", "renew"]);
/// `error_label`, and `no_runtime` from `Hold::unreleased`.
const ERROR: Label = (
    "error",
    &[
        "timeout",
        "restart_quarantine",
        "lost",
        "not_installed",
        "wrong_type",
        "auth",
        "read_only",
        "unavailable",
        "command_timeout",
        "not_replicated",
        "no_quorum",
        "shut_down",
        "config",
        "redis",
        "no_runtime",
    ],
);

/// Every metric, its type and its labels, from the `count`, `observe`,
/// `add` and `held_by` calls (and the watchdog lag's `gauge!`) in
/// telemetry.rs.
static METRICS: [Metric; 14] = [
    // `Acquiring::finish`, granted.
    Metric {
        name: metric_names::LOCK_ACQUIRED_TOTAL,
        ty: Type::Counter,
        labels: &[KIND],
    },
    // `Acquiring::finish`, timed out.
    Metric {
        name: metric_names::LOCK_TIMEOUTS_TOTAL,
        ty: Type::Counter,
        labels: &[KIND, CAUSE],
    },
    // `Tracked::lost`.
    Metric {
        name: metric_names::LOCK_LOST_TOTAL,
        ty: Type::Counter,
        labels: &[KIND, REASON],
    },
    // `Hold::finish`, released.
    Metric {
        name: metric_names::LOCK_RELEASED_TOTAL,
        ty: Type::Counter,
        labels: &[KIND],
    },
    // `Acquiring::finish`, `Hold::end` and `renewal`.
    Metric {
        name: metric_names::LOCK_ERRORS_TOTAL,
        ty: Type::Counter,
        labels: &[KIND, OPERATION, ERROR],
    },
    // `Acquiring::finish`, every outcome.
    Metric {
        name: metric_names::LOCK_WAIT_SECONDS,
        ty: Type::Histogram,
        labels: &[KIND, ("outcome", &["acquired", "timed_out", "error"])],
    },
    // `Hold::end`; `finish` and `unreleased` give the outcome.
    Metric {
        name: metric_names::LOCK_HOLD_SECONDS,
        ty: Type::Histogram,
        labels: &[KIND, ("outcome", &["released", "lost", "error"])],
    },
    // `renewal`, once per renewal call.
    Metric {
        name: metric_names::LOCK_RENEWAL_ROUND_TRIP_SECONDS,
        ty: Type::Histogram,
        labels: &[("outcome", &["ok", "error"])],
    },
    // `held_by`, from `Tracked::held` and `Tracked::unheld`.
    Metric {
        name: metric_names::LOCK_HELD,
        ty: Type::Gauge,
        labels: &[KIND],
    },
    // `Waiter::new` and its `Drop`.
    Metric {
        name: metric_names::LOCK_WAITERS,
        ty: Type::Gauge,
        labels: &[KIND],
    },
    // `ClientGauges::new` and its `Drop`.
    Metric {
        name: metric_names::CLIENTS,
        ty: Type::Gauge,
        labels: &[],
    },
    // `ClientGauges::report`.
    Metric {
        name: metric_names::SUBSCRIBER_CONNECTED,
        ty: Type::Gauge,
        labels: &[],
    },
    // `ClientGauges::report`.
    Metric {
        name: metric_names::RESTART_QUARANTINED,
        ty: Type::Gauge,
        labels: &[],
    },
    // `ClientGauges::report` through `show_lag`: the largest of the clients' last readings.
    Metric {
        name: metric_names::WATCHDOG_LAG_SECONDS,
        ty: Type::Gauge,
        labels: &[],
    },
];

/// Labels Prometheus adds to every series it scrapes.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// The upper bound of a `_bucket` series of a histogram (set by the
/// exporter, metrics-exporter-prometheus).
const BUCKET_LABEL: &str = "le";

/// The series Prometheus has for one histogram.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// The severities an alert may have.
const SEVERITIES: [&str; 3] = ["critical", "warning", "info"];

// The tests.

#[test]
fn the_metric_table_is_the_librarys() {
    let table: BTreeSet<&str> = METRICS.iter().map(|metric| metric.name).collect();
    let library: BTreeSet<&str> = metric_names::ALL.into_iter().collect();
    assert_eq!(
        table, library,
        "METRICS in this file must list exactly lock_runtime::metric_names::ALL, \
         with each metric's type and labels from lock-runtime/src/base/telemetry.rs"
    );
    assert_eq!(
        table.len(),
        METRICS.len(),
        "a metric listed twice in METRICS"
    );
}

#[test]
fn dashboard_queries_read_only_what_the_library_records() {
    assert_clean(DASHBOARD, &check_dashboard(&load_json(DASHBOARD)));
}

#[test]
fn dashboard_shows_every_metric() {
    assert_clean(DASHBOARD, &unshown_metrics(&load_json(DASHBOARD)));
}

#[test]
fn alert_rules_are_well_formed_and_read_only_what_the_library_records() {
    let mut problems = Vec::new();
    check_alerts(&read(ALERTS), &mut problems);
    assert_clean(ALERTS, &problems);
}

#[test]
fn readme_names_every_panel_and_alert() {
    let readme = read(README);
    let mut names = Vec::new();
    panel_titles(items(&load_json(DASHBOARD)["panels"]), &mut names);
    names.extend(check_alerts(&read(ALERTS), &mut Vec::new()));
    let problems: Vec<String> = names
        .iter()
        .filter(|name| !readme.contains(name.as_str()))
        .map(|name| format!("does not mention `{name}`"))
        .collect();
    assert_clean(README, &problems);
}

/// The checks themselves catch what they are for: a test that passes on
/// anything would let the kit drift unseen.
#[test]
fn the_checks_catch_drift() {
    let caught = |expr: &str, needle: &str| {
        let problems = check_promql(expr).problems;
        assert!(
            problems.iter().any(|problem| problem.contains(needle)),
            "`{expr}`: expected a problem naming `{needle}`, got {problems:?}"
        );
    };
    caught(
        "rate(lock_runtime_lost_locks_total[5m])",
        "lock_runtime_lost_locks_total",
    );
    caught("rate(lock_runtme_lost_total[5m])", "lock_runtme_lost_total");
    caught("lock_runtime_acquired_total_count", "not a histogram");
    caught("rate(lock_runtime_wait_seconds[5m])", "bare");
    caught(
        "sum by (key) (rate(lock_runtime_acquired_total[5m]))",
        "`key`",
    );
    caught(
        "lock_runtime_renewal_round_trip_seconds_count{kind=\"fair\"}",
        "`kind`",
    );
    caught("lock_runtime_lost_total{reason=\"gone\"}", "\"gone\"");
    caught(
        "lock_runtime_lost_total{reason=~\"gone|expired\"}",
        "\"gone\"",
    );
    caught("lock_runtime_locks_held{le=\"1\"}", "`le`");
    caught("sum(rate(lock_runtime_lost_total[5m])", "never closed");
    caught("rat(lock_runtime_lost_total[5m])", "`rat`");

    let fine = check_promql(
        "histogram_quantile(0.99, sum by (le, kind) (rate(\
         lock_runtime_wait_seconds_bucket{job=~\"$job\", outcome=\"acquired\"}[$__rate_interval])))",
    );
    assert_eq!(fine.problems, Vec::<String>::new());
    assert_eq!(fine.result, BTreeSet::from(["kind"]));

    assert!(parse_json(r#"{"a": [1, 2,]}"#).is_err(), "a trailing comma");
    assert!(parse_json(r#"{"a": 1, "a": 2}"#).is_err(), "a repeated key");
    assert!(
        parse_json(r#"[{"a": {"b": 1, "b": 2}}]"#).is_err(),
        "a repeated key, deeper"
    );
}

/// The same, through the whole check of each file: a copy of the kit with
/// one thing broken fails, and the problem names the panel or alert and what
/// is wrong.
#[test]
fn the_checks_catch_drift_in_a_copy_of_the_kit() {
    let dashboard = |from: &str, to: &str| {
        parse_json(&broken(DASHBOARD, from, to)).unwrap_or_else(|err| panic!("{err}"))
    };
    let held = "lock_runtime_locks_held{";
    let renamed = dashboard(held, "lock_runtime_held_locks{");
    assert_caught(
        &check_dashboard(&renamed),
        &["\"Locks held now\"", "`lock_runtime_held_locks`"],
    );
    let unshown = parse_json(&read(DASHBOARD).replace(held, "lock_runtime_held_locks{")).unwrap();
    assert_caught(&unshown_metrics(&unshown), &["`lock_runtime_locks_held`"]);
    let legend = dashboard("{{kind}} {{cause}}", "{{kind}} {{reason}}");
    assert_caught(
        &check_dashboard(&legend),
        &["\"Timeouts/s by cause\"", "legend", "`reason`"],
    );
    let variable = dashboard("instance=~\\\"$instance\\\"", "instance=~\\\"$host\\\"");
    assert_caught(&check_dashboard(&variable), &["`$host`"]);
    let err = parse_json(&broken(
        DASHBOARD,
        "\"refId\": \"A\"",
        "\"refId\": \"A\", \"refId\": \"B\"",
    ))
    .expect_err("a repeated key");
    assert!(err.to_string().contains("`refId` repeated"), "{err}");

    let alerts = |from: &str, to: &str| {
        let mut problems = Vec::new();
        check_alerts(&broken(ALERTS, from, to), &mut problems);
        problems
    };
    let slow = "LockRuntimeRenewalSlow";
    assert_caught(
        &alerts(
            "lock_runtime_renewal_round_trip_seconds_bucket",
            "lock_runtime_renewal_rtt_seconds_bucket",
        ),
        &[slow, "`lock_runtime_renewal_rtt_seconds_bucket`"],
    );
    assert_caught(&alerts("        for: 10m\n", ""), &[slow, "no `for:`"]);
    assert_caught(
        &alerts("for: 10m", "for: 10 minutes"),
        &[slow, "not a duration"],
    );
    assert_caught(
        &alerts("        for: 10m\n", "        for: 10m\n        fro: 10m\n"),
        &[slow, "unknown field `fro`"],
    );
    assert_caught(
        &alerts("severity: warning", "severity: page"),
        &[slow, "`severity:` one of"],
    );
    assert_caught(
        &alerts(
            "description: >-\n            The 99th",
            "descr: >-\n            The 99th",
        ),
        &[slow, "`description:`"],
    );
    assert_caught(
        &alerts(
            "{{ $labels.kind }} lock acquisitions",
            "{{ $labels.reason }} lock acquisitions",
        ),
        &[
            "LockRuntimeTimeoutsHigh",
            "`annotations.summary`",
            "`reason`",
        ],
    );
    assert_caught(
        &alerts("- alert: LockRuntimeErrors", "- alert: LockRuntimeLockLost"),
        &["`LockRuntimeLockLost` defined twice"],
    );
    assert_caught(
        &alerts(
            "  - name: lock-runtime\n",
            "  - name: lock-runtime\n    label: x\n",
        ),
        &["unknown field `label`"],
    );
    assert_caught(
        &alerts(
            "severity: critical\n",
            "severity: critical\n          severity: info\n",
        ),
        &["duplicate entry with key \"severity\""],
    );
}

// The dashboard.

/// One query of the dashboard: a panel's target or a template variable's.
struct Query {
    place: String,
    expr: String,
    /// A panel's (not a variable's).
    panel: bool,
    /// The target's `legendFormat`.
    legend: Option<String>,
}

impl Query {
    fn check(&self) -> Reads {
        let mut reads = if self.panel {
            check_promql(&self.expr)
        } else {
            check_variable_query(&self.expr)
        };
        if let Some(legend) = self.legend.as_ref().filter(|_| reads.problems.is_empty()) {
            let mut wrong = Vec::new();
            check_template_labels(legend, "{{", &reads.result, &mut wrong);
            let wrong = wrong.into_iter().map(|problem| format!("legend {problem}"));
            reads.problems.extend(wrong);
        }
        reads
    }
}

/// Checks the dashboard's layout, variables and panels, and every query in
/// it.
fn check_dashboard(dashboard: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if !dashboard["schemaVersion"].is_number() {
        problems.push("no `schemaVersion`".to_owned());
    }
    for key in ["title", "uid"] {
        if !dashboard[key].is_string() {
            problems.push(format!("no `{key}`"));
        }
    }
    let variables = items(&dashboard["templating"]["list"]);
    let named = |name: &str| variables.iter().find(|variable| variable["name"] == name);
    match named("datasource") {
        Some(variable) if variable["type"] == "datasource" && variable["query"] == "prometheus" => {
        }
        _ => problems.push(
            "needs a template variable `datasource` of type `datasource`, query `prometheus`"
                .to_owned(),
        ),
    }
    for name in ["job", "instance"] {
        if named(name).is_none() {
            problems.push(format!("needs a template variable `{name}`"));
        }
    }
    let mut ids = BTreeSet::new();
    check_panels(items(&dashboard["panels"]), &mut ids, &mut problems);
    if ids.is_empty() {
        problems.push("no panels".to_owned());
    }
    for query in dashboard_queries(dashboard, &mut problems) {
        for problem in query.check().problems {
            problems.push(format!("{}: {problem}", query.place));
        }
    }
    problems
}

/// The library's metrics that no panel reads.
fn unshown_metrics(dashboard: &Value) -> Vec<String> {
    let mut shown = BTreeSet::new();
    for query in dashboard_queries(dashboard, &mut Vec::new()) {
        if query.panel {
            shown.extend(query.check().metrics);
        }
    }
    metric_names::ALL
        .into_iter()
        .filter(|name| !shown.contains(name))
        .map(|name| {
            format!("no panel reads `{name}`: give the new metric a panel (and a line in {README})")
        })
        .collect()
}

fn check_panels(panels: &[Value], ids: &mut BTreeSet<i64>, problems: &mut Vec<String>) {
    for panel in panels {
        let place = panel_place(panel);
        match panel["id"].as_f64() {
            Some(id) if ids.insert(id as i64) => {}
            Some(id) => problems.push(format!("{place}: id {id} used twice")),
            None => problems.push(format!("{place}: no `id`")),
        }
        let cell = |key: &str| panel["gridPos"][key].as_f64();
        match (cell("x"), cell("y"), cell("w"), cell("h")) {
            (Some(x), Some(_), Some(w), Some(_)) if x + w <= 24.0 => {}
            _ => problems.push(format!(
                "{place}: `gridPos` needs x, y, w, h within 24 columns"
            )),
        }
        if panel["type"] == "row" {
            check_panels(items(&panel["panels"]), ids, problems);
            continue;
        }
        if !uses_the_datasource_variable(panel) {
            problems.push(format!("{place}: its datasource must be `${{datasource}}`"));
        }
        let targets = items(&panel["targets"]);
        if targets.is_empty() {
            problems.push(format!("{place}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for target in targets {
            match target["refId"].as_str() {
                Some(id) if refs.insert(id) => {}
                _ => problems.push(format!("{place}: a target without a `refId` of its own")),
            }
            if target.get("datasource").is_some() && !uses_the_datasource_variable(target) {
                problems.push(format!(
                    "{place}: a target's datasource must be `${{datasource}}`"
                ));
            }
        }
    }
}

fn uses_the_datasource_variable(panel: &Value) -> bool {
    panel["datasource"]["uid"] == "${datasource}"
}

fn panel_place(panel: &Value) -> String {
    let title = panel["title"].as_str().unwrap_or("");
    format!("panel {} \"{title}\"", panel["id"])
}

fn panel_titles(panels: &[Value], into: &mut Vec<String>) {
    for panel in panels {
        if panel["type"] == "row" {
            panel_titles(items(&panel["panels"]), into);
        } else if let Some(title) = panel["title"].as_str() {
            into.push(title.to_owned());
        }
    }
}

/// Every query of the dashboard: the panels' targets (rows' panels too) and
/// the template variables of type `query`; also checks that the Grafana
/// variables they use are defined.
fn dashboard_queries(dashboard: &Value, problems: &mut Vec<String>) -> Vec<Query> {
    let mut queries = Vec::new();
    let variables = items(&dashboard["templating"]["list"]);
    for variable in variables
        .iter()
        .filter(|variable| variable["type"] == "query")
    {
        let name = variable["name"].as_str().unwrap_or("");
        let query = &variable["query"];
        match query.as_str().or_else(|| query["query"].as_str()) {
            Some(expr) => queries.push(Query {
                place: format!("variable `{name}`"),
                expr: expr.to_owned(),
                panel: false,
                legend: None,
            }),
            None => problems.push(format!("variable `{name}`: no query")),
        }
    }
    collect_targets(items(&dashboard["panels"]), &mut queries, problems);
    let defined: BTreeSet<&str> = variables
        .iter()
        .filter_map(|variable| variable["name"].as_str())
        .collect();
    for query in &queries {
        for variable in grafana_variables(&query.expr) {
            // `$__rate_interval` and the like are Grafana's own; a bare `$`
            // ends a regular expression.
            if !variable.is_empty() && !variable.starts_with("__") && !defined.contains(variable) {
                problems.push(format!(
                    "{}: uses `${variable}`, which the dashboard does not define",
                    query.place
                ));
            }
        }
    }
    queries
}

fn collect_targets(panels: &[Value], queries: &mut Vec<Query>, problems: &mut Vec<String>) {
    for panel in panels {
        collect_targets(items(&panel["panels"]), queries, problems);
        for target in items(&panel["targets"]) {
            let id = target["refId"].as_str().unwrap_or("?");
            let place = format!("{}, target {id}", panel_place(panel));
            match target["expr"].as_str() {
                Some(expr) => queries.push(Query {
                    place,
                    expr: expr.to_owned(),
                    panel: true,
                    legend: target["legendFormat"].as_str().map(str::to_owned),
                }),
                None => problems.push(format!("{place}: no `expr`")),
            }
        }
    }
}

/// The names of the Grafana variables in a query: `$name` and `${name}`.
fn grafana_variables(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for (at, _) in expr.match_indices('$') {
        let rest = &expr[at + 1..];
        let rest = rest.strip_prefix('{').unwrap_or(rest);
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        names.push(&rest[..end]);
    }
    names
}

/// A variable's query: `label_values(series, label)`, or PromQL.
fn check_variable_query(query: &str) -> Reads {
    let Some(args) = query
        .strip_prefix("label_values(")
        .and_then(|args| args.strip_suffix(')'))
    else {
        return check_promql(query);
    };
    let Some((series, label)) = args.rsplit_once(',') else {
        let mut reads = Reads::default();
        reads.problems.push(format!(
            "`{query}`: name the series too, `label_values(series, label)`"
        ));
        return reads;
    };
    let mut reads = check_promql(series.trim());
    let label = label.trim();
    if !reads.labels.contains(label) {
        reads.problems.push(format!(
            "`{query}`: its series have no label `{label}` (they have {})",
            list(&reads.labels)
        ));
    }
    reads
}

// The alert rules.

/// A Prometheus rule file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    #[serde(default)]
    name: String,
    /// Each read as a [`Rule`] on its own, so that a problem names its alert.
    #[serde(default)]
    rules: Vec<yaml_serde::Value>,
    #[serde(rename = "interval")]
    _interval: Option<IgnoredAny>,
    #[serde(rename = "limit")]
    _limit: Option<IgnoredAny>,
}

/// An alerting rule: a recording rule's `record:`, or any other key
/// Prometheus would not take, is an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    /// Read from the rule as it is, to name it in every problem.
    #[serde(rename = "alert")]
    _alert: Option<String>,
    expr: Option<String>,
    #[serde(rename = "for")]
    pending: Option<String>,
    #[serde(rename = "keep_firing_for")]
    _keep_firing_for: Option<IgnoredAny>,
    #[serde(default)]
    labels: BTreeMap<String, yaml_serde::Value>,
    #[serde(default)]
    annotations: BTreeMap<String, yaml_serde::Value>,
}

/// Checks a rule file; its alerts' names.
fn check_alerts(text: &str, problems: &mut Vec<String>) -> Vec<String> {
    let mut alerts = Vec::new();
    let file: RuleFile = match yaml_serde::from_str(text) {
        Ok(file) => file,
        Err(err) => {
            problems.push(format!("not rules this test can read: {err}"));
            return alerts;
        }
    };
    for (index, group) in file.groups.iter().enumerate() {
        let place = format!("group {} `{}`", index + 1, group.name);
        if group.name.is_empty() {
            problems.push(format!("{place}: no `name:`"));
        }
        if group.rules.is_empty() {
            problems.push(format!("{place}: no `rules:`"));
        }
        for rule in &group.rules {
            if let Some(alert) = check_rule(rule, &place, problems) {
                if alerts.contains(&alert) {
                    problems.push(format!("{place}: alert `{alert}` defined twice"));
                }
                alerts.push(alert);
            }
        }
    }
    if alerts.is_empty() {
        problems.push("no alert rules".to_owned());
    }
    alerts
}

/// Checks one rule; its alert's name.
fn check_rule(rule: &yaml_serde::Value, group: &str, problems: &mut Vec<String>) -> Option<String> {
    let alert = rule["alert"].as_str();
    let place = format!("{group}, alert `{}`", alert.unwrap_or("?"));
    let named = alert.filter(|alert| {
        alert.starts_with(|c: char| c.is_ascii_uppercase())
            && alert.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    if named.is_none() {
        problems.push(format!(
            "{place}: needs `alert:` with a name like `LockRuntimeLockLost` (recording rules do not belong here)"
        ));
    }
    match Rule::deserialize(rule) {
        Ok(rule) => check_rule_fields(&rule, &place, problems),
        Err(err) => problems.push(format!("{place}: {err}")),
    }
    named.map(str::to_owned)
}

fn check_rule_fields(rule: &Rule, place: &str, problems: &mut Vec<String>) {
    let reads = match &rule.expr {
        Some(expr) => check_promql(expr),
        None => {
            problems.push(format!("{place}: no `expr:`"));
            Reads::default()
        }
    };
    for problem in &reads.problems {
        problems.push(format!("{place}: expr {problem}"));
    }
    match &rule.pending {
        Some(duration) if is_duration(duration) => {}
        Some(duration) => problems.push(format!("{place}: `for: {duration}` is not a duration")),
        None => problems.push(format!("{place}: no `for:`")),
    }
    let severity = rule
        .labels
        .get("severity")
        .and_then(yaml_serde::Value::as_str);
    if !severity.is_some_and(|severity| SEVERITIES.contains(&severity)) {
        problems.push(format!(
            "{place}: needs `labels:` with `severity:` one of {}",
            SEVERITIES.join(", ")
        ));
    }
    for (section, entries) in [("labels", &rule.labels), ("annotations", &rule.annotations)] {
        for (key, value) in entries {
            match value.as_str() {
                Some(text) if reads.problems.is_empty() => {
                    let mut wrong = Vec::new();
                    check_template_labels(text, "$labels.", &reads.result, &mut wrong);
                    problems.extend(
                        wrong
                            .into_iter()
                            .map(|problem| format!("{place}: `{section}.{key}` {problem}")),
                    );
                }
                Some(_) => {} // the expr is wrong already
                None => problems.push(format!("{place}: `{section}.{key}` is not a string")),
            }
        }
    }
    for key in ["summary", "description"] {
        let text = rule
            .annotations
            .get(key)
            .and_then(yaml_serde::Value::as_str);
        if text.is_none_or(|text| text.trim().is_empty()) {
            problems.push(format!("{place}: needs `annotations:` with `{key}:`"));
        }
    }
}

/// A Prometheus duration: `30s`, `5m`, `1h30m`, `0m`.
fn is_duration(text: &str) -> bool {
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|unit| rest[digits..].starts_with(unit));
        match unit {
            Some(unit) if digits > 0 => rest = &rest[digits + unit.len()..],
            _ => return false,
        }
    }
    !text.is_empty()
}

/// Checks the labels a template names (`{{kind}}` in a legend,
/// `$labels.kind` in an annotation) against the labels of the query's result.
fn check_template_labels(
    text: &str,
    opener: &str,
    result: &BTreeSet<&'static str>,
    problems: &mut Vec<String>,
) {
    for (at, _) in text.match_indices(opener) {
        let rest = text[at + opener.len()..].trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let label = &rest[..end];
        if opener == "{{" && !rest[end..].trim_start().starts_with("}}") {
            continue; // not a plain `{{label}}`
        }
        if !result.contains(label) {
            problems.push(format!(
                "uses the label `{label}`, which its query's result does not have (it has {})",
                list(result)
            ));
        }
    }
}

// PromQL.

/// What a query reads, and what is wrong with it.
#[derive(Default, Debug)]
struct Reads {
    /// The library's metrics it reads (a histogram by its own name).
    metrics: BTreeSet<&'static str>,
    /// The labels of the series it selects: the library's labels on those
    /// metrics, the target labels, and `le` for buckets.
    labels: BTreeSet<&'static str>,
    /// It names a series the library does not export (so its labels are
    /// not known either).
    unknown_series: bool,
    /// The labels its result keeps, as far as `by (...)` says.
    result: BTreeSet<&'static str>,
    problems: Vec<String>,
}

/// Aggregation operators of PromQL.
const AGGREGATIONS: &str = "\
    sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk \
    limit_ratio";

/// Functions of PromQL, so that a misspelt one fails here too.
const FUNCTIONS: &str = "\
    abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes \
    clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year \
    days_in_month deg delta deriv double_exponential_smoothing exp floor histogram_avg \
    histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar \
    histogram_sum holt_winters hour idelta increase irate label_join label_replace \
    last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi \
    predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin \
    sinh sort sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time \
    stdvar_over_time sum_over_time tan tanh time timestamp vector year";

/// Whether `name` is one of the whitespace-separated `words`.
fn is_one_of(name: &str, words: &str) -> bool {
    words.split_whitespace().any(|word| word == name)
}

/// Keywords followed by a list of labels in parentheses.
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other keywords (and the number literals that look like words).
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan",
];

fn check_promql(expr: &str) -> Reads {
    let mut reads = Reads::default();
    let tokens = match tokenize(expr) {
        Ok(tokens) => tokens,
        Err(err) => {
            reads.problems.push(format!("does not parse: {err}"));
            return reads;
        }
    };
    if tokens.is_empty() {
        reads.problems.push("is empty".to_owned());
    }
    let mut by: Vec<Vec<&str>> = Vec::new();
    let mut other_lists: Vec<&str> = Vec::new();
    let (mut without, mut aggregates) = (false, false);
    let mut at = 0;
    while at < tokens.len() {
        let Token::Ident(name) = tokens[at] else {
            at += 1;
            continue;
        };
        let called = tokens.get(at + 1) == Some(&Token::Punct("("));
        // `sum by (kind) (...)`: the labels come before the argument.
        let grouped = matches!(tokens.get(at + 1), Some(Token::Ident("by" | "without")));
        if is_one_of(name, AGGREGATIONS) && (called || grouped) {
            aggregates = true;
            at += 1;
        } else if GROUPING.contains(&name) {
            if !called {
                reads
                    .problems
                    .push(format!("`{name}` without a list of labels"));
                at += 1;
                continue;
            }
            let mut labels = Vec::new();
            at = label_list(&tokens, at + 2, &mut labels, &mut reads.problems);
            match name {
                "by" => by.push(labels.clone()),
                "without" => without = true,
                _ => {}
            }
            other_lists.extend(labels);
        } else if called {
            if !is_one_of(name, FUNCTIONS) {
                reads
                    .problems
                    .push(format!("calls `{name}`, which is not a PromQL function"));
            }
            at += 1;
        } else if KEYWORDS.contains(&name.to_ascii_lowercase().as_str()) {
            at += 1;
        } else {
            at = selector(&tokens, at, &mut reads);
        }
    }
    for label in other_lists.into_iter().filter(|_| !reads.unknown_series) {
        if !reads.labels.contains(label) {
            reads.problems.push(format!(
                "groups or matches by `{label}`, which none of its series has (they have {})",
                list(&reads.labels)
            ));
        }
    }
    reads.result = if without || (by.is_empty() && !aggregates) {
        reads.labels.clone()
    } else {
        // Each aggregation keeps its `by` labels only.
        reads
            .labels
            .iter()
            .copied()
            .filter(|label| by.iter().all(|kept| kept.contains(label)))
            .collect()
    };
    if tokens.contains(&Token::Ident("histogram_quantile")) {
        reads.result.remove(BUCKET_LABEL);
    }
    reads
}

/// Reads `label, label, ...)` from `at`; the position after the `)`.
fn label_list<'a>(
    tokens: &[Token<'a>],
    mut at: usize,
    into: &mut Vec<&'a str>,
    problems: &mut Vec<String>,
) -> usize {
    loop {
        match tokens.get(at) {
            Some(Token::Punct(")")) => return at + 1,
            Some(Token::Ident(label)) => {
                into.push(label);
                at += 1;
                if tokens.get(at) == Some(&Token::Punct(",")) {
                    at += 1;
                }
            }
            other => {
                problems.push(format!(
                    "expected a label in a list of labels, found {other:?}"
                ));
                return tokens.len();
            }
        }
    }
}

/// Checks the series selector at `at` (a name, maybe `{matchers}`); the
/// position after it.
fn selector(tokens: &[Token<'_>], at: usize, reads: &mut Reads) -> usize {
    let Token::Ident(name) = tokens[at] else {
        unreachable!("a selector starts with a name")
    };
    let series = match resolve(name) {
        Ok((metric, bucket)) => {
            reads.metrics.insert(metric.name);
            reads
                .labels
                .extend(metric.labels.iter().map(|(label, _)| *label));
            reads.labels.extend(TARGET_LABELS);
            if bucket {
                reads.labels.insert(BUCKET_LABEL);
            }
            Some((metric, bucket))
        }
        Err(problem) => {
            reads.problems.push(problem);
            reads.unknown_series = true;
            None
        }
    };
    let mut at = at + 1;
    if tokens.get(at) != Some(&Token::Punct("{")) {
        return at;
    }
    at += 1;
    loop {
        match (tokens.get(at), tokens.get(at + 1), tokens.get(at + 2)) {
            (Some(Token::Punct("}")), _, _) => return at + 1,
            (Some(Token::Ident(label)), Some(Token::Matcher(op)), Some(Token::Str(value))) => {
                if let Some((metric, bucket)) = series {
                    check_matcher(metric, bucket, label, op, value, &mut reads.problems);
                }
                at += 3;
                if tokens.get(at) == Some(&Token::Punct(",")) {
                    at += 1;
                }
            }
            _ => {
                reads.problems.push(format!(
                    "a matcher of `{name}` is not `label=\"value\"` (or !=, =~, !~)"
                ));
                return tokens[at..]
                    .iter()
                    .position(|token| *token == Token::Punct("}"))
                    .map_or(tokens.len(), |end| at + end + 1);
            }
        }
    }
}

/// The library's metric a series belongs to, and whether the series is a
/// histogram's `_bucket`.
fn resolve(series: &str) -> Result<(&'static Metric, bool), String> {
    let metric = |name: &str| {
        METRICS
            .iter()
            .find(|metric| metric.name == name && metric_names::ALL.contains(&name))
    };
    if let Some(metric) = metric(series) {
        if metric.ty == Type::Histogram {
            return Err(format!(
                "names the histogram `{series}` bare: Prometheus has only its series \
                 `{series}_bucket`, `{series}_sum` and `{series}_count`"
            ));
        }
        return Ok((metric, false));
    }
    for suffix in HISTOGRAM_SUFFIXES {
        if let Some(metric) = series.strip_suffix(suffix).and_then(metric) {
            if metric.ty != Type::Histogram {
                return Err(format!(
                    "names `{series}`, but `{}` is a {:?}, not a histogram: it has no `{suffix}` series",
                    metric.name, metric.ty
                ));
            }
            return Ok((metric, suffix == "_bucket"));
        }
    }
    Err(format!(
        "names `{series}`, which is not a metric lock-runtime exports \
         (lock_runtime::metric_names::ALL: {})",
        metric_names::ALL.join(", ")
    ))
}

fn check_matcher(
    metric: &Metric,
    bucket: bool,
    label: &str,
    op: &str,
    value: &str,
    problems: &mut Vec<String>,
) {
    if TARGET_LABELS.contains(&label) || (bucket && label == BUCKET_LABEL) {
        return;
    }
    let Some((_, values)) = metric.labels.iter().find(|(name, _)| *name == label) else {
        let names: BTreeSet<&str> = metric.labels.iter().map(|(name, _)| *name).collect();
        problems.push(format!(
            "selects `{}` by `{label}`, a label the library does not set on it (it sets {})",
            metric.name,
            list(&names)
        ));
        return;
    };
    if value.contains('$') {
        return; // a Grafana variable
    }
    let plain_alternation = value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b"_-|".contains(&b));
    let wanted: Vec<&str> = match op {
        "=" | "!=" => vec![value],
        _ if plain_alternation => value.split('|').collect(),
        _ => return, // another regular expression: not checked
    };
    for wanted in wanted {
        if !values.contains(&wanted) {
            problems.push(format!(
                "selects `{label}=\"{wanted}\"` of `{}`, a value the library never sets (it sets {})",
                metric.name,
                values.join(", ")
            ));
        }
    }
}

#[derive(Debug, PartialEq)]
enum Token<'a> {
    Ident(&'a str),
    Str(String),
    /// A number or a duration: `0.99`, `5m`.
    Number,
    /// A Grafana variable: `$job`, `${job}`, `$__rate_interval`.
    Variable,
    /// A label matcher's operator: `=`, `!=`, `=~`, `!~`.
    Matcher(&'a str),
    /// Brackets, commas and the other operators.
    Punct(&'a str),
}

/// Splits a query into tokens, and checks that its brackets pair up.
fn tokenize(expr: &str) -> Result<Vec<Token<'_>>, String> {
    let bytes = expr.as_bytes();
    let mut tokens = Vec::new();
    let mut open: Vec<(u8, usize)> = Vec::new();
    let mut at = 0;
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    while at < bytes.len() {
        let start = at;
        let c = bytes[at];
        let next = bytes.get(at + 1).copied();
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => at += 1,
            b'#' => at = expr[at..].find('\n').map_or(bytes.len(), |end| at + end),
            b'"' | b'\'' | b'`' => {
                let (value, end) = promql_string(expr, at)?;
                tokens.push(Token::Str(value));
                at = end;
            }
            b'$' => {
                at += 1;
                if next == Some(b'{') {
                    at += expr[at..]
                        .find('}')
                        .ok_or(format!("`${{` at byte {start} is never closed"))?
                        + 1;
                } else {
                    while at < bytes.len() && word(bytes[at]) {
                        at += 1;
                    }
                }
                tokens.push(Token::Variable);
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while at < bytes.len() && word(bytes[at]) {
                    at += 1;
                }
                tokens.push(Token::Ident(&expr[start..at]));
            }
            c if c.is_ascii_digit() || c == b'.' => {
                while at < bytes.len()
                    && (bytes[at].is_ascii_alphanumeric()
                        || bytes[at] == b'.'
                        || (b"+-".contains(&bytes[at]) && b"eE".contains(&bytes[at - 1])))
                {
                    at += 1;
                }
                tokens.push(Token::Number);
            }
            b'(' | b'{' | b'[' => {
                open.push((c, start));
                at += 1;
                tokens.push(Token::Punct(&expr[start..at]));
            }
            b')' | b'}' | b']' => {
                let opener = match c {
                    b')' => b'(',
                    b'}' => b'{',
                    _ => b'[',
                };
                match open.pop() {
                    Some((was, _)) if was == opener => {}
                    Some((was, from)) => {
                        return Err(format!(
                            "`{}` at byte {start} closes the `{}` at byte {from}",
                            c as char, was as char
                        ));
                    }
                    None => return Err(format!("`{}` at byte {start} closes nothing", c as char)),
                }
                at += 1;
                tokens.push(Token::Punct(&expr[start..at]));
            }
            b'=' | b'!' => {
                at += if matches!(next, Some(b'~' | b'=')) {
                    2
                } else {
                    1
                };
                let op = &expr[start..at];
                tokens.push(match op {
                    "==" => Token::Punct(op),
                    "!" => return Err(format!("a lone `!` at byte {start}")),
                    _ => Token::Matcher(op),
                });
            }
            b'<' | b'>' => {
                at += if next == Some(b'=') { 2 } else { 1 };
                tokens.push(Token::Punct(&expr[start..at]));
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b',' | b':' | b'@' => {
                at += 1;
                tokens.push(Token::Punct(&expr[start..at]));
            }
            _ => {
                let c = expr[at..].chars().next().unwrap_or('?');
                return Err(format!("unexpected `{c}` at byte {start}"));
            }
        }
    }
    match open.pop() {
        Some((c, from)) => Err(format!("`{}` at byte {from} is never closed", c as char)),
        None => Ok(tokens),
    }
}

/// The PromQL string starting at `start` and the position after it.
fn promql_string(expr: &str, start: usize) -> Result<(String, usize), String> {
    let mut chars = expr[start..].char_indices();
    let (_, quote) = chars.next().expect("a quote");
    let mut value = String::new();
    while let Some((offset, c)) = chars.next() {
        match c {
            c if c == quote => return Ok((value, start + offset + 1)),
            '\\' if quote != '`' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err(format!("the string at byte {start} is never closed"))
}

// JSON.

/// A JSON value whose objects repeat no key: serde_json's own `Value` keeps
/// the last of two silently, as Grafana would, and hides the first.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique(Value::Null))
    }

    fn visit_bool<E>(self, value: bool) -> Result<Unique, E> {
        Ok(Unique(value.into()))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Unique, E> {
        Ok(Unique(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Unique, E> {
        Ok(Unique(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Unique, E> {
        Ok(Unique(value.into()))
    }

    fn visit_str<E>(self, value: &str) -> Result<Unique, E> {
        Ok(Unique(value.into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Unique(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("key `{key}` repeated")));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Unique(Value::Object(object)))
    }
}

fn parse_json(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(text).map(|Unique(value)| value)
}

fn load_json(relative: &str) -> Value {
    parse_json(&read(relative)).unwrap_or_else(|err| panic!("{relative} is not JSON: {err}"))
}

/// An array's items; none for anything else.
fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

// Helpers.

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{relative} ({}): {err}", path.display()))
}

/// `relative`'s text with the first `from` in it replaced by `to`.
fn broken(relative: &str, from: &str, to: &str) -> String {
    let text = read(relative);
    assert!(
        text.contains(from),
        "{relative} no longer has `{from}`: break it somewhere else in this test"
    );
    text.replacen(from, to, 1)
}

/// Asserts that one of the problems names every one of `needles`.
fn assert_caught(problems: &[String], needles: &[&str]) {
    assert!(
        problems
            .iter()
            .any(|problem| needles.iter().all(|needle| problem.contains(needle))),
        "expected a problem naming {needles:?}, got {problems:#?}"
    );
}

fn list(labels: &BTreeSet<&str>) -> String {
    if labels.is_empty() {
        "none".to_owned()
    } else {
        labels.iter().copied().collect::<Vec<_>>().join(", ")
    }
}

fn assert_clean(file: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{file}: {} problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}
