//! The Grafana dashboard (deploy/grafana/freeride-dashboard.json) asks only for metrics the agent
//! exports, by labels they carry: every `freeride_*` name in a panel's query is a metric of
//! `status::prometheus` / `status::watchdog_prometheus`, and every label a panel groups or names
//! its series by is one of that metric's labels (or `instance`/`job`, which Prometheus adds).
use freeride_agent::collect::ProcessView;
use freeride_agent::node::GpuState;
use freeride_agent::status;
use freeride_agent::watchdog::{Watchdog, WatchdogPolicy};
use std::collections::{BTreeMap, BTreeSet};

/// Metric name -> its label names, from the agent's own exposition text.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let gpu = GpuState {
        gpu: freeride_agent::inference::obs::GpuId(0),
        trainers: vec![1],
        open: None,
        period_ns: None,
        ops_per_iteration: 0,
        bubble_ns_total: 1,
        bubbles: 1,
        since_ns: 0,
        grant_time: Some(Default::default()),
    };
    let proc = ProcessView {
        pid: 1,
        role: None,
        device: 0,
        gone: false,
        events: 1,
        dropped: 1,
        invalid: 0,
        mem_held_bytes: 1,
        mem_by_device: vec![(0, 1)],
        ends_late_until_ns: 0,
    };
    let wd = Watchdog::new(
        std::path::Path::new("/nonexistent"),
        WatchdogPolicy {
            hang_ns: 0,
            mem_grace_ns: 0,
        },
    );
    let text = status::prometheus(&[gpu], &[proc]) + &status::watchdog_prometheus(&wd);
    let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let labels = m.entry(name.clone()).or_default();
        if let Some(rest) = line[name.len()..].strip_prefix('{') {
            for kv in rest.split('}').next().unwrap_or("").split(',') {
                if let Some((k, _)) = kv.split_once('=') {
                    labels.insert(k.to_string());
                }
            }
        }
    }
    m
}

fn words_after(text: &str, start: &str, end: char) -> Vec<String> {
    text.match_indices(start)
        .filter_map(|(i, _)| text[i + start.len()..].split(end).next())
        .flat_map(|s| s.split(',').map(|w| w.trim().to_string()))
        .filter(|w| !w.is_empty())
        .collect()
}

#[test]
fn the_dashboard_queries_only_what_the_agent_exports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/freeride-dashboard.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
    let metrics = exported();
    assert!(
        metrics.contains_key("freeride_bubble_seconds_total"),
        "{metrics:?}"
    );
    let mut queried = BTreeSet::new();
    let panels = dash["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for p in panels {
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            let names: Vec<String> = expr
                .match_indices("freeride_")
                .map(|(i, _)| {
                    expr[i..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect()
                })
                .collect();
            assert!(!names.is_empty(), "{expr}: no freeride metric");
            let mut labels: BTreeSet<String> = BTreeSet::new();
            for n in &names {
                let l = metrics
                    .get(n)
                    .unwrap_or_else(|| panic!("{expr}: the agent exports no {n}"));
                labels.extend(l.iter().cloned());
                queried.insert(n.clone());
            }
            labels.extend(["instance".to_string(), "job".to_string()]);
            let legend = t["legendFormat"].as_str().unwrap_or("");
            let used = words_after(expr, "by (", ')')
                .into_iter()
                .chain(words_after(legend, "{{", '}'));
            for l in used {
                assert!(
                    labels.contains(&l),
                    "{expr} / {legend}: no label {l:?} on {names:?}"
                );
            }
        }
    }
    // Every metric the agent exports has a panel.
    let all: BTreeSet<String> = metrics.keys().cloned().collect();
    assert_eq!(queried, all, "metrics without a panel");
}
