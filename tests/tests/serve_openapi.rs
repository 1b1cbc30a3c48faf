//! `reel serve`'s `/openapi.json`: the document covers every route, and an OpenAPI fuzzer
//! (schemathesis, from PyPI) driving the real server from it finds no server error and no
//! answer that breaks the document (status codes, content types, bodies).

use std::{collections::BTreeSet, process::Command};

use reel_tests::{
    TestPackage,
    served::{Served, echo_command},
};
use serde_json::Value;

const TOKEN: (&str, &str) = ("REEL_TEST_TOKEN", "sesame");

fn start(dir: &std::path::Path) -> Served {
    Served::start(
        &echo_command(),
        &dir.join("t.db"),
        &["--token-env", TOKEN.0],
        &[TOKEN],
    )
}

#[tokio::test]
async fn the_document_describes_every_route_and_its_guard() {
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let answer = served
        .client
        .get(served.url("/openapi.json"))
        .bearer_auth(TOKEN.1)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let document: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let paths: BTreeSet<&str> = document["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let routes = BTreeSet::from([
        "/healthz",
        "/metrics",
        "/openapi.json",
        "/v1/search",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/events",
        "/v1/sessions/{id}/export",
        "/v1/sessions/{id}/fork",
        "/v1/sessions/{id}/requests",
        "/v1/sessions/{id}/stream",
        "/v1/sessions/{id}/ws",
    ]);
    assert_eq!(paths, routes);
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let refused = operation["responses"].get("401").is_some();
            assert_eq!(refused, path != "/healthz", "{method} {path}");
        }
    }
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let codes = &document["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["enum"];
    for code in ["session_not_found", "unauthorized", "ordinal_out_of_range"] {
        assert!(
            codes.as_array().unwrap().contains(&Value::from(code)),
            "{codes}"
        );
    }
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let Some(python) = TestPackage::Schemathesis.ready() else {
        return;
    };
    let st = python.with_file_name("st");
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let schema = served.url("/openapi.json");
    let auth = format!("Authorization: Bearer {}", TOKEN.1);
    // Event streams and WebSockets never end, so a fuzzer cannot wait for their answers;
    // real clients test them (serve_streams.rs, serve_websocket.rs).
    let run = tokio::task::spawn_blocking(move || {
        Command::new(st)
            .args(["run", &schema, "-H", &auth])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                "--exclude-path-regex",
                "/(events|ws)$",
                "--max-time",
                "45",
                "--request-timeout",
                "10",
                // One worker: with two, the fuzzer's own threads race in Hypothesis (it parses
                // lambdas' source with `ast.parse`, which CPython 3.11 does not make safe across
                // threads), and 2 runs of 16 ended in "SystemError: AST constructor recursion
                // depth mismatch" or a KeyError, with every answer of reel's conforming.
                "--workers",
                "1",
                "--no-color",
            ])
            .current_dir(dir.path())
            .env("SCHEMATHESIS_HOOKS", "")
            .output()
            .expect("schemathesis runs")
    })
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "schemathesis found problems:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // Every operation but the two endless streams (events, ws) was exercised; the Durable
    // Streams route is fuzzed too (a random offset never names the tail, so no read waits).
    assert!(report.contains("Tested: 11"), "{report}");
}
