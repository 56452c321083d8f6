//! The conformance scenarios this repository holds `POST /mcp` to: the list
//! `scripts/mcp_conformance.sh` judges by (`scenarios.txt`) and the table in
//! docs/mcp.md say the same, every scenario is `required` or
//! `not-applicable`, and each that does not apply says why.

use std::collections::BTreeMap;

const LIST: &str = include_str!("../fixtures/mcp-conformance/scenarios.txt");
const DOC: &str = include_str!("../../docs/mcp.md");

/// Scenario → (verdict, why), from the list.
fn listed() -> BTreeMap<String, (String, String)> {
    LIST.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut words = line.split_whitespace();
            let scenario = words.next().unwrap_or_default().to_string();
            let verdict = words.next().unwrap_or_default().to_string();
            (scenario, (verdict, words.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// Scenario → (verdict, why), from docs/mcp.md's table.
fn documented() -> BTreeMap<String, (String, String)> {
    DOC.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let scenario = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((
                scenario.to_string(),
                (cells.get(2)?.to_string(), cells.get(3)?.to_string()),
            ))
        })
        .filter(|(_, (verdict, _))| verdict == "required" || verdict == "not-applicable")
        .collect()
}

#[test]
fn the_scenario_list_and_the_docs_agree_and_every_exception_says_why() {
    let listed = listed();
    assert!(
        listed.len() >= 40,
        "the list has {} scenarios",
        listed.len()
    );
    assert_eq!(
        documented(),
        listed,
        "docs/mcp.md's table and scenarios.txt differ"
    );
    for (scenario, (verdict, why)) in &listed {
        match verdict.as_str() {
            "required" => {}
            "not-applicable" => assert!(!why.is_empty(), "{scenario}: no reason given"),
            other => panic!("{scenario}: verdict {other:?}"),
        }
    }
    for named in [
        "server-stateless",
        "tasks-lifecycle",
        "tools-call-with-progress",
    ] {
        assert_eq!(listed[named].0, "required", "{named}");
    }
}
