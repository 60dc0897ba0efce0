//! The operator's kit in `ops/` against the library: the Grafana dashboard
//! parses as JSON and the alert rules as YAML, every query in them names only
//! metrics that `lock_runtime::metric_names` exports and labels (and label
//! values) that the library sets on them, and the dashboard shows every
//! metric. A metric renamed, removed or added fails here, not in someone's
//! Grafana. No Redis needed.
//!
//! The parsers are small and strict on purpose: JSON in full, YAML in the
//! subset alert rules use (block mappings and lists, plain and quoted
//! scalars, `|` and `>` blocks), PromQL down to its tokens, brackets and
//! selectors. `promtool check rules ops/prometheus/alerts.yml` is the full
//! check of the PromQL; this one knows what the library records.

use std::collections::BTreeSet;
use std::path::Path;

use lock_runtime::metric_names;

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

/// `kind_label`, which is `LockKind::as_str` (base/kind.rs).
const KIND: Label = ("kind", &["exclusive", "semaphore", "read-write", "fair"]);
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
        "config",
        "redis",
        "no_runtime",
    ],
);

/// Every metric, its type and its labels, from the `count`, `observe` and
/// `held_by` calls in telemetry.rs.
static METRICS: [Metric; 9] = [
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
    let dashboard = load_json(DASHBOARD);
    let mut problems = Vec::new();
    check_dashboard_structure(&dashboard, &mut problems);
    for query in dashboard_queries(&dashboard, &mut problems) {
        let reads = query.check();
        for problem in reads.problems {
            problems.push(format!("{}: {problem}", query.place));
        }
    }
    assert_clean(DASHBOARD, &problems);
}

#[test]
fn dashboard_shows_every_metric() {
    let dashboard = load_json(DASHBOARD);
    let mut problems = Vec::new();
    let mut shown = BTreeSet::new();
    for query in dashboard_queries(&dashboard, &mut problems) {
        if query.panel {
            shown.extend(query.check().metrics);
        }
    }
    for name in metric_names::ALL {
        if !shown.contains(name) {
            problems.push(format!(
                "no panel reads `{name}`: give the new metric a panel (and a line in {README})"
            ));
        }
    }
    assert_clean(DASHBOARD, &problems);
}

#[test]
fn alert_rules_are_well_formed_and_read_only_what_the_library_records() {
    let text = read(ALERTS);
    let rules = parse_yaml(&text)
        .unwrap_or_else(|err| panic!("{ALERTS} is not YAML this test can read: {err}"));
    let mut problems = Vec::new();
    let alerts = check_alerts(&rules, &mut problems);
    if alerts.is_empty() {
        problems.push("no alert rules".to_owned());
    }
    assert_clean(ALERTS, &problems);
}

#[test]
fn readme_names_every_panel_and_alert() {
    let readme = read(README);
    let mut problems = Vec::new();
    let dashboard = load_json(DASHBOARD);
    let mut titles = Vec::new();
    panel_titles(
        dashboard.get("panels").and_then(Json::array).unwrap_or(&[]),
        &mut titles,
    );
    let rules = parse_yaml(&read(ALERTS)).unwrap_or_else(|err| panic!("{ALERTS}: {err}"));
    let alerts = check_alerts(&rules, &mut Vec::new());
    for name in titles.iter().chain(&alerts) {
        if !readme.contains(name.as_str()) {
            problems.push(format!("does not mention `{name}`"));
        }
    }
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
    let yaml = parse_yaml("a:\n  - b: |\n      x\n      y\n    c: 'it''s'\n").unwrap();
    let item = &yaml.get("a").and_then(Yaml::list).unwrap()[0];
    assert_eq!(item.get("b").and_then(Yaml::scalar), Some("x\ny\n"));
    assert_eq!(item.get("c").and_then(Yaml::scalar), Some("it's"));
    assert!(parse_yaml("a: 1\n  b: 2\n").is_err(), "a stray indentation");
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

fn check_dashboard_structure(dashboard: &Json, problems: &mut Vec<String>) {
    if dashboard
        .get("schemaVersion")
        .and_then(Json::number)
        .is_none()
    {
        problems.push("no `schemaVersion`".to_owned());
    }
    for key in ["title", "uid"] {
        if dashboard.get(key).and_then(Json::string).is_none() {
            problems.push(format!("no `{key}`"));
        }
    }
    let variables = dashboard
        .get("templating")
        .and_then(|templating| templating.get("list"))
        .and_then(Json::array)
        .unwrap_or(&[]);
    let named = |name: &str| {
        variables
            .iter()
            .find(|variable| variable.get("name").and_then(Json::string) == Some(name))
    };
    match named("datasource") {
        Some(variable)
            if variable.get("type").and_then(Json::string) == Some("datasource")
                && variable.get("query").and_then(Json::string) == Some("prometheus") => {}
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
    check_panels(
        dashboard.get("panels").and_then(Json::array).unwrap_or(&[]),
        &mut ids,
        problems,
    );
    if ids.is_empty() {
        problems.push("no panels".to_owned());
    }
}

fn check_panels(panels: &[Json], ids: &mut BTreeSet<i64>, problems: &mut Vec<String>) {
    for panel in panels {
        let place = panel_place(panel);
        match panel.get("id").and_then(Json::number) {
            Some(id) if ids.insert(id as i64) => {}
            Some(id) => problems.push(format!("{place}: id {id} used twice")),
            None => problems.push(format!("{place}: no `id`")),
        }
        let grid = panel.get("gridPos");
        let cell = |key: &str| grid.and_then(|grid| grid.get(key)).and_then(Json::number);
        match (cell("x"), cell("y"), cell("w"), cell("h")) {
            (Some(x), Some(_), Some(w), Some(_)) if x + w <= 24.0 => {}
            _ => problems.push(format!(
                "{place}: `gridPos` needs x, y, w, h within 24 columns"
            )),
        }
        if panel.get("type").and_then(Json::string) == Some("row") {
            check_panels(
                panel.get("panels").and_then(Json::array).unwrap_or(&[]),
                ids,
                problems,
            );
            continue;
        }
        if !uses_the_datasource_variable(panel) {
            problems.push(format!("{place}: its datasource must be `${{datasource}}`"));
        }
        let targets = panel.get("targets").and_then(Json::array).unwrap_or(&[]);
        if targets.is_empty() {
            problems.push(format!("{place}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for target in targets {
            match target.get("refId").and_then(Json::string) {
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

fn uses_the_datasource_variable(panel: &Json) -> bool {
    panel
        .get("datasource")
        .and_then(|datasource| datasource.get("uid"))
        .and_then(Json::string)
        == Some("${datasource}")
}

fn panel_place(panel: &Json) -> String {
    let id = panel.get("id").and_then(Json::number).unwrap_or(f64::NAN);
    let title = panel.get("title").and_then(Json::string).unwrap_or("");
    format!("panel {id} \"{title}\"")
}

fn panel_titles(panels: &[Json], into: &mut Vec<String>) {
    for panel in panels {
        if panel.get("type").and_then(Json::string) == Some("row") {
            panel_titles(
                panel.get("panels").and_then(Json::array).unwrap_or(&[]),
                into,
            );
        } else if let Some(title) = panel.get("title").and_then(Json::string) {
            into.push(title.to_owned());
        }
    }
}

/// Every query of the dashboard: the panels' targets (rows' panels too) and
/// the template variables of type `query`; also checks that the Grafana
/// variables they use are defined.
fn dashboard_queries(dashboard: &Json, problems: &mut Vec<String>) -> Vec<Query> {
    let mut queries = Vec::new();
    let variables = dashboard
        .get("templating")
        .and_then(|templating| templating.get("list"))
        .and_then(Json::array)
        .unwrap_or(&[]);
    for variable in variables {
        if variable.get("type").and_then(Json::string) != Some("query") {
            continue;
        }
        let name = variable.get("name").and_then(Json::string).unwrap_or("");
        let query = variable.get("query");
        let expr = query.and_then(Json::string).or_else(|| {
            query
                .and_then(|query| query.get("query"))
                .and_then(Json::string)
        });
        match expr {
            Some(expr) => queries.push(Query {
                place: format!("variable `{name}`"),
                expr: expr.to_owned(),
                panel: false,
                legend: None,
            }),
            None => problems.push(format!("variable `{name}`: no query")),
        }
    }
    collect_targets(
        dashboard.get("panels").and_then(Json::array).unwrap_or(&[]),
        &mut queries,
        problems,
    );
    let defined: BTreeSet<&str> = variables
        .iter()
        .filter_map(|variable| variable.get("name").and_then(Json::string))
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

fn collect_targets(panels: &[Json], queries: &mut Vec<Query>, problems: &mut Vec<String>) {
    for panel in panels {
        collect_targets(
            panel.get("panels").and_then(Json::array).unwrap_or(&[]),
            queries,
            problems,
        );
        for target in panel.get("targets").and_then(Json::array).unwrap_or(&[]) {
            let id = target.get("refId").and_then(Json::string).unwrap_or("?");
            let place = format!("{}, target {id}", panel_place(panel));
            match target.get("expr").and_then(Json::string) {
                Some(expr) => queries.push(Query {
                    place,
                    expr: expr.to_owned(),
                    panel: true,
                    legend: target
                        .get("legendFormat")
                        .and_then(Json::string)
                        .map(str::to_owned),
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

/// Checks the rules; the alerts' names.
fn check_alerts(rules: &Yaml, problems: &mut Vec<String>) -> Vec<String> {
    let mut alerts = Vec::new();
    let Some(groups) = rules.get("groups").and_then(Yaml::list) else {
        problems.push("no `groups:` list at the top".to_owned());
        return alerts;
    };
    for (index, group) in groups.iter().enumerate() {
        let name = group.get("name").and_then(Yaml::scalar).unwrap_or("");
        let place = format!("group {} `{name}`", index + 1);
        if name.is_empty() {
            problems.push(format!("{place}: no `name:`"));
        }
        unknown_keys(
            group,
            &["name", "interval", "limit", "rules"],
            &place,
            problems,
        );
        let rules = group.get("rules").and_then(Yaml::list).unwrap_or(&[]);
        if rules.is_empty() {
            problems.push(format!("{place}: no `rules:`"));
        }
        for rule in rules {
            if let Some(alert) = check_rule(rule, &place, problems) {
                if alerts.contains(&alert) {
                    problems.push(format!("{place}: alert `{alert}` defined twice"));
                }
                alerts.push(alert);
            }
        }
    }
    alerts
}

/// Checks one rule; its alert's name.
fn check_rule(rule: &Yaml, group: &str, problems: &mut Vec<String>) -> Option<String> {
    let alert = rule.get("alert").and_then(Yaml::scalar);
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
    unknown_keys(
        rule,
        &[
            "alert",
            "expr",
            "for",
            "keep_firing_for",
            "labels",
            "annotations",
        ],
        &place,
        problems,
    );
    let reads = match rule.get("expr").and_then(Yaml::scalar) {
        Some(expr) => check_promql(expr),
        None => {
            problems.push(format!("{place}: no `expr:`"));
            Reads::default()
        }
    };
    for problem in &reads.problems {
        problems.push(format!("{place}: expr {problem}"));
    }
    match rule.get("for").and_then(Yaml::scalar) {
        Some(duration) if is_duration(duration) => {}
        Some(duration) => problems.push(format!("{place}: `for: {duration}` is not a duration")),
        None => problems.push(format!("{place}: no `for:`")),
    }
    let severity = rule
        .get("labels")
        .and_then(|labels| labels.get("severity"))
        .and_then(Yaml::scalar);
    if !severity.is_some_and(|severity| SEVERITIES.contains(&severity)) {
        problems.push(format!(
            "{place}: needs `labels:` with `severity:` one of {}",
            SEVERITIES.join(", ")
        ));
    }
    for section in ["labels", "annotations"] {
        for (key, value) in rule.get(section).and_then(Yaml::map).unwrap_or(&[]) {
            match value.scalar() {
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
            .get("annotations")
            .and_then(|annotations| annotations.get(key))
            .and_then(Yaml::scalar);
        if text.is_none_or(|text| text.trim().is_empty()) {
            problems.push(format!("{place}: needs `annotations:` with `{key}:`"));
        }
    }
    named.map(str::to_owned)
}

fn unknown_keys(map: &Yaml, known: &[&str], place: &str, problems: &mut Vec<String>) {
    match map.map() {
        Some(entries) => {
            for (key, _) in entries {
                if !known.contains(&key.as_str()) {
                    problems.push(format!(
                        "{place}: unknown key `{key}` (known: {})",
                        known.join(", ")
                    ));
                }
            }
        }
        None => problems.push(format!("{place}: not a mapping")),
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

#[derive(Debug)]
enum Json {
    Null,
    /// `true` or `false` (nothing here reads which).
    Bool,
    Number(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(entries) => entries
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value),
            _ => None,
        }
    }

    fn string(&self) -> Option<&str> {
        match self {
            Json::String(text) => Some(text),
            _ => None,
        }
    }

    fn number(&self) -> Option<f64> {
        match self {
            Json::Number(number) => Some(*number),
            _ => None,
        }
    }

    fn array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }
}

fn parse_json(text: &str) -> Result<Json, String> {
    let mut parser = JsonParser { text, at: 0 };
    let value = parser.value()?;
    parser.space();
    if parser.at < text.len() {
        return Err(parser.error("text after the value"));
    }
    Ok(value)
}

struct JsonParser<'a> {
    text: &'a str,
    at: usize,
}

impl JsonParser<'_> {
    fn error(&self, what: &str) -> String {
        let before = &self.text[..self.at];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |newline| newline + 1) + 1;
        format!("line {line}, column {column}: {what}")
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let ate = self.peek() == Some(byte);
        if ate {
            self.at += 1;
        }
        ate
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{}`", byte as char)))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.space();
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Json::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => {
                for (word, value) in [
                    ("true", Json::Bool),
                    ("false", Json::Bool),
                    ("null", Json::Null),
                ] {
                    if self.text[self.at..].starts_with(word) {
                        self.at += word.len();
                        return Ok(value);
                    }
                }
                Err(self.error("expected a value"))
            }
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.at += 1;
        let mut entries: Vec<(String, Json)> = Vec::new();
        self.space();
        if self.eat(b'}') {
            return Ok(Json::Object(entries));
        }
        loop {
            self.space();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key"));
            }
            let key = self.string()?;
            if entries.iter().any(|(name, _)| *name == key) {
                return Err(self.error(&format!("key `{key}` repeated")));
            }
            self.space();
            self.expect(b':')?;
            let value = self.value()?;
            entries.push((key, value));
            self.space();
            if self.eat(b'}') {
                return Ok(Json::Object(entries));
            }
            self.expect(b',')?;
        }
    }

    fn array(&mut self) -> Result<Json, String> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.eat(b']') {
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.space();
            if self.eat(b']') {
                return Ok(Json::Array(items));
            }
            self.expect(b',')?;
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.at..].chars().next() else {
                return Err(self.error("a string is never closed"));
            };
            self.at += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let escaped = self.peek();
                    self.at += 1;
                    out.push(match escaped {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => return Err(self.error("an unknown escape")),
                    });
                }
                c if c < ' ' => return Err(self.error("a control character in a string")),
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .filter(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("expected 4 hex digits after `\\u`"))?;
        self.at += 4;
        u32::from_str_radix(digits, 16).map_err(|err| self.error(&err.to_string()))
    }

    fn unicode_escape(&mut self) -> Result<char, String> {
        let first = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&first) {
            if !self.text[self.at..].starts_with("\\u") {
                return Err(self.error("a lone surrogate"));
            }
            self.at += 2;
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(self.error("a lone surrogate"));
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        char::from_u32(code).ok_or_else(|| self.error("not a character"))
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.at;
        self.eat(b'-');
        if !self.eat(b'0') && !self.digits() {
            return Err(self.error("expected a digit"));
        }
        if self.eat(b'.') && !self.digits() {
            return Err(self.error("expected a digit after `.`"));
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if !self.digits() {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        self.text[start..self.at]
            .parse()
            .map(Json::Number)
            .map_err(|err| self.error(&format!("{err}")))
    }

    fn digits(&mut self) -> bool {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at > start
    }
}

// YAML, the subset alert rules are written in.

#[derive(Debug)]
enum Yaml {
    Scalar(String),
    List(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    fn get(&self, key: &str) -> Option<&Yaml> {
        self.map()?
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value)
    }

    fn scalar(&self) -> Option<&str> {
        match self {
            Yaml::Scalar(text) => Some(text),
            _ => None,
        }
    }

    fn list(&self) -> Option<&[Yaml]> {
        match self {
            Yaml::List(items) => Some(items),
            _ => None,
        }
    }

    fn map(&self) -> Option<&[(String, Yaml)]> {
        match self {
            Yaml::Map(entries) => Some(entries),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
struct YamlLine<'a> {
    number: usize,
    indent: usize,
    /// The line after its indentation, without trailing blanks (after a
    /// list item's `- `, for a mapping that starts on the item's line).
    text: &'a str,
    raw: &'a str,
}

fn parse_yaml(text: &str) -> Result<Yaml, String> {
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let body = raw.trim_start_matches(' ');
        if body.starts_with('\t') {
            return Err(format!("line {}: a tab in the indentation", index + 1));
        }
        lines.push(YamlLine {
            number: index + 1,
            indent: raw.len() - body.len(),
            text: body.trim_end(),
            raw,
        });
    }
    let mut parser = YamlParser { lines, at: 0 };
    if parser.next_line().is_some_and(|line| line.text == "---") {
        parser.at += 1;
    }
    let Some(first) = parser.next_line() else {
        return Err("no document".to_owned());
    };
    let root = parser.node(first.indent)?;
    match parser.next_line() {
        Some(line) => Err(format!(
            "line {}: indented less than the document",
            line.number
        )),
        None => Ok(root),
    }
}

struct YamlParser<'a> {
    lines: Vec<YamlLine<'a>>,
    at: usize,
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// `key: value` or `key:`, with a plain key.
fn key_value(text: &str) -> Option<(&str, &str)> {
    let (key, value) = match text.split_once(": ") {
        Some(pair) => pair,
        None => (text.strip_suffix(':')?, ""),
    };
    let value = value.trim();
    let value = if value.starts_with('#') { "" } else { value };
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    plain.then_some((key, value))
}

impl<'a> YamlParser<'a> {
    /// The next line with content, past blank lines and comments.
    fn next_line(&mut self) -> Option<YamlLine<'a>> {
        while let Some(line) = self.lines.get(self.at) {
            if !line.text.is_empty() && !line.text.starts_with('#') {
                return Some(*line);
            }
            self.at += 1;
        }
        None
    }

    fn node(&mut self, indent: usize) -> Result<Yaml, String> {
        match self.next_line() {
            Some(line) if is_item(line.text) => self.list(indent),
            _ => self.map(indent),
        }
    }

    fn list(&mut self, indent: usize) -> Result<Yaml, String> {
        let mut items = Vec::new();
        while let Some(line) = self.next_line() {
            if line.indent < indent || (line.indent == indent && !is_item(line.text)) {
                break;
            }
            if line.indent > indent {
                return Err(format!("line {}: indented more than its list", line.number));
            }
            let rest = line.text[1..].trim_start();
            if rest.is_empty() {
                self.at += 1;
                match self.next_line() {
                    Some(next) if next.indent > indent => items.push(self.node(next.indent)?),
                    _ => return Err(format!("line {}: an empty list item", line.number)),
                }
            } else if key_value(rest).is_some() {
                // A mapping that starts on the item's line: read it as if
                // its first key were on a line of its own.
                let shift = line.text.len() - rest.len();
                let current = &mut self.lines[self.at];
                current.indent += shift;
                current.text = rest;
                items.push(self.map(indent + shift)?);
            } else {
                self.at += 1;
                items.push(Yaml::Scalar(yaml_scalar(rest, line.number)?));
            }
        }
        Ok(Yaml::List(items))
    }

    fn map(&mut self, indent: usize) -> Result<Yaml, String> {
        let mut entries: Vec<(String, Yaml)> = Vec::new();
        while let Some(line) = self.next_line() {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return Err(format!(
                    "line {}: indented more than the key before it (a plain value on several lines is not read here)",
                    line.number
                ));
            }
            if is_item(line.text) {
                return Err(format!(
                    "line {}: a list item among a mapping's keys",
                    line.number
                ));
            }
            let Some((key, value)) = key_value(line.text) else {
                return Err(format!(
                    "line {}: expected `key: value`, found `{}`",
                    line.number, line.text
                ));
            };
            if entries.iter().any(|(name, _)| name == key) {
                return Err(format!("line {}: key `{key}` repeated", line.number));
            }
            self.at += 1;
            let value = if value.is_empty() {
                match self.next_line() {
                    Some(next) if next.indent > indent => self.node(next.indent)?,
                    Some(next) if next.indent == indent && is_item(next.text) => {
                        self.list(indent)?
                    }
                    _ => return Err(format!("line {}: `{key}` has no value", line.number)),
                }
            } else if value.starts_with(['|', '>']) {
                self.block(indent, value, line.number)?
            } else {
                Yaml::Scalar(yaml_scalar(value, line.number)?)
            };
            entries.push((key.to_owned(), value));
        }
        Ok(Yaml::Map(entries))
    }

    /// A `|` (literal) or `>` (folded) block under a key at `indent`.
    fn block(&mut self, indent: usize, header: &str, number: usize) -> Result<Yaml, String> {
        let strip = match header {
            "|" | ">" => false,
            "|-" | ">-" => true,
            _ => {
                return Err(format!(
                    "line {number}: the block header `{header}` (only |, |-, > and >- are read here)"
                ));
            }
        };
        let mut lines: Vec<&str> = Vec::new();
        let mut block_indent = None;
        while let Some(line) = self.lines.get(self.at) {
            if line.text.is_empty() {
                lines.push("");
            } else if line.indent <= indent {
                break;
            } else {
                let at = *block_indent.get_or_insert(line.indent);
                if line.indent < at {
                    return Err(format!(
                        "line {}: indented less than the first line of its block",
                        line.number
                    ));
                }
                lines.push(line.raw[at..].trim_end());
            }
            self.at += 1;
        }
        while lines.last() == Some(&"") {
            lines.pop();
        }
        if lines.is_empty() {
            return Err(format!("line {number}: an empty block"));
        }
        let mut text = if header.starts_with('|') {
            lines.join("\n")
        } else {
            // Folded: a line break between two lines becomes a space; an
            // empty line stays a line break.
            let mut text = String::new();
            let mut space = false;
            for line in lines {
                if line.is_empty() {
                    text.push('\n');
                    space = false;
                } else {
                    if space {
                        text.push(' ');
                    }
                    text.push_str(line);
                    space = true;
                }
            }
            text
        };
        if !strip {
            text.push('\n');
        }
        Ok(Yaml::Scalar(text))
    }
}

/// A scalar on one line: plain, `'single'` or `"double"` quoted.
fn yaml_scalar(value: &str, number: usize) -> Result<String, String> {
    let after = |rest: &str| {
        let rest = rest.trim_start();
        if rest.is_empty() || rest.starts_with('#') {
            Ok(())
        } else {
            Err(format!("line {number}: `{rest}` after a quoted value"))
        }
    };
    let mut chars = value.char_indices();
    match chars.next() {
        Some((_, '"')) => {
            let mut text = String::new();
            while let Some((at, c)) = chars.next() {
                match c {
                    '"' => return after(&value[at + 1..]).map(|()| text),
                    '\\' => text.push(match chars.next() {
                        Some((_, 'n')) => '\n',
                        Some((_, 't')) => '\t',
                        Some((_, c @ ('"' | '\\' | '/'))) => c,
                        _ => return Err(format!("line {number}: an escape not read here")),
                    }),
                    c => text.push(c),
                }
            }
            Err(format!("line {number}: a quoted value is never closed"))
        }
        Some((_, '\'')) => {
            let mut text = String::new();
            while let Some((at, c)) = chars.next() {
                if c != '\'' {
                    text.push(c);
                } else if value[at + 1..].starts_with('\'') {
                    text.push('\'');
                    chars.next();
                } else {
                    return after(&value[at + 1..]).map(|()| text);
                }
            }
            Err(format!("line {number}: a quoted value is never closed"))
        }
        Some((_, '[' | '{' | '&' | '*' | '!' | '%' | '@' | '`' | '|' | '>')) => Err(format!(
            "line {number}: `{value}`: flow collections, anchors, aliases and tags are not read here"
        )),
        _ => {
            let plain = value.split(" #").next().unwrap_or("").trim_end();
            if plain.contains(": ") {
                return Err(format!("line {number}: `{plain}` has `: ` in it: quote it"));
            }
            Ok(plain.to_owned())
        }
    }
}

// Helpers.

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{relative} ({}): {err}", path.display()))
}

fn load_json(relative: &str) -> Json {
    parse_json(&read(relative)).unwrap_or_else(|err| panic!("{relative} is not JSON: {err}"))
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
