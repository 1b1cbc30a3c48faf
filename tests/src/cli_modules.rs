//! The `reel` binary's modules import one way: `main.rs` and `cli.rs` (the command line) ->
//! each subcommand in `cli/src/commands/` -> the shared set-up beside that folder. These tests
//! read the `crate::` and `super::` paths of `cli/src` and fail on an import from one subcommand
//! into another, on shared set-up that reaches back into a subcommand, and on any circle.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// Each node of `cli/src` (a subcommand is `commands/NAME`, anything else its top-level module)
/// with the nodes its files name.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let module = module_path(&file.strip_prefix(src).unwrap().with_extension(""));
        let text = std::fs::read_to_string(&file).unwrap();
        let from = node(&module);
        let imports = graph.entry(from.clone()).or_default();
        for path in paths_in(&text, &module) {
            let to = node(&path);
            if to != from && !to.is_empty() {
                imports.insert(to);
            }
        }
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `commands/tail/jetstream` -> [commands, tail, jetstream]; a `mod.rs` is its folder's module.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

fn node(path: &[String]) -> String {
    match path {
        [first, second, ..] if first == "commands" => format!("commands/{second}"),
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// Every module path a file names through `crate::` or `super::`, resolved from `module` and
/// cut to its first two names (enough to tell one subcommand from another).
fn paths_in(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (start, prefix) in [("crate::", None), ("super::", Some(()))] {
        for (at, _) in text.match_indices(start) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut base = match prefix {
                None => Vec::new(),
                // `super` of `commands/tail/jetstream` is `commands/tail`; of a `mod.rs` (or a
                // file in `commands/`), its parent folder's module.
                Some(()) => module[..module.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &text[at + start.len()..];
            while let Some(next) = rest.strip_prefix("super::") {
                base.pop();
                rest = next;
            }
            for tail in heads(rest, 2usize.saturating_sub(base.len().min(2))) {
                let mut path = base.clone();
                path.extend(tail);
                path.truncate(2);
                found.push(path);
            }
        }
    }
    found
}

/// The first `depth` names of each path that `rest` (the text after `crate::`) begins with:
/// one path, or each path of a `{a::b, c}` group.
fn heads(rest: &str, depth: usize) -> Vec<Vec<String>> {
    if depth == 0 {
        return vec![Vec::new()];
    }
    if let Some(group) = rest.strip_prefix('{') {
        let mut level = 1;
        let mut items = Vec::new();
        let mut item_start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => level += 1,
                '}' if level == 1 => {
                    items.push(&group[item_start..i]);
                    break;
                }
                '}' => level -= 1,
                ',' if level == 1 => {
                    items.push(&group[item_start..i]);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        return items
            .into_iter()
            .map(str::trim_start)
            .filter(|item| !item.is_empty() && !item.starts_with("self"))
            .flat_map(|item| heads(item, depth))
            .collect();
    }
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() {
        return Vec::new();
    }
    let after = &rest[name.len()..];
    let mut paths = match after.strip_prefix("::") {
        Some(next) => heads(next, depth - 1),
        None => vec![Vec::new()],
    };
    if paths.is_empty() {
        paths.push(Vec::new());
    }
    for path in &mut paths {
        path.insert(0, name.clone());
    }
    paths
}

/// A circle of the graph, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        node: &'a str,
        trail: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = trail.iter().position(|n| *n == node) {
            return Some(trail[at..].iter().map(|n| (*n).to_owned()).collect());
        }
        if !done.insert(node) {
            return None;
        }
        trail.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(graph, next, trail, done) {
                return Some(found);
            }
        }
        trail.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

#[test]
fn no_subcommand_imports_another_and_no_module_circle() {
    let graph = import_graph(&crate::repo_root().join("cli/src"));
    assert!(
        graph.contains_key("commands/serve") && graph.contains_key("stored"),
        "the graph was read: {graph:?}"
    );
    for (from, imports) in &graph {
        for to in imports {
            let into_command = to.starts_with("commands/") || to == "cli" || to == "main";
            let allowed = match from.as_str() {
                "main" | "cli" | "commands" => true,
                _ => !into_command,
            };
            assert!(
                allowed,
                "cli/src: {from} imports {to}; a subcommand builds on the shared set-up only"
            );
        }
    }
    if let Some(found) = circle(&graph) {
        panic!("cli/src has a circle of imports: {}", found.join(" -> "));
    }
}

#[test]
fn the_check_sees_groups_super_and_circles() {
    let module = vec![
        "commands".to_owned(),
        "tail".to_owned(),
        "jetstream".to_owned(),
    ];
    let found = paths_in(
        "use crate::{exit, stored::{Database, each_event}, commands::show::x};\nuse super::TailArgs;\nlet a = super::super::fork::run;",
        &module,
    );
    let nodes: BTreeSet<String> = found.iter().map(|p| node(p)).collect();
    let expected: BTreeSet<String> = [
        "exit",
        "stored",
        "commands/show",
        "commands/tail",
        "commands/fork",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(nodes, expected);
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", &["b"][..]), ("b", &["c"][..]), ("c", &["a"][..])]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
            .collect();
    assert_eq!(circle(&graph).map(|c| c.len()), Some(3));
}
