//! What a new user meets first, tried as one would: a real provider without its key, without a
//! model, with a base URL missing its scheme; `reel serve --listen 8088`; a server's log while
//! sessions come and go. Each is said at once, naming what to do, before anything is called.

use reel_tests::{
    reel,
    served::{Served, echo_command},
};

fn stderr_of(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = reel(args);
    command
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_providers_own_service_without_a_key_is_refused_naming_the_variable() {
    for (provider, variable) in [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
    ] {
        let (code, stderr) = stderr_of(
            &[
                "run-command",
                "examples/echo.yaml",
                "--provider",
                provider,
                "--model",
                "m",
            ],
            &[],
        );
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("{variable} is not set")) && stderr.contains("--api-key-env"),
            "{stderr}"
        );
    }
    // Another variable, named by --api-key-env, is the one named then.
    let (_, stderr) = stderr_of(
        &[
            "run-command",
            "examples/echo.yaml",
            "--provider",
            "openai",
            "--model",
            "m",
            "--api-key-env",
            "MY_GATEWAY_KEY",
        ],
        &[],
    );
    assert!(stderr.contains("MY_GATEWAY_KEY is not set"), "{stderr}");
}

#[test]
fn a_real_provider_needs_a_model_and_a_base_url_with_its_scheme() {
    let key = [("OPENAI_API_KEY", "sk-not-used")];
    let (code, stderr) = stderr_of(
        &["run-command", "examples/echo.yaml", "--provider", "openai"],
        &key,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("needs a model") && stderr.contains("--model"),
        "{stderr}"
    );
    let (code, stderr) = stderr_of(
        &[
            "run-command",
            "examples/echo.yaml",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            "localhost:8080/v1",
        ],
        &key,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("has no http:// or https://") && stderr.contains("e.g. http://"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("retry"),
        "refused before any call: {stderr}"
    );
}

#[test]
fn a_port_alone_for_listen_gets_an_example() {
    let (code, stderr) = stderr_of(
        &[
            "serve",
            "--listen",
            "8088",
            "--command",
            "examples/echo.yaml",
            "--timeline-db",
            "x.db",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("e.g. 127.0.0.1:8088"), "{stderr}");
}

#[tokio::test]
async fn a_server_does_not_log_every_session_it_loads() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    for id in ["a", "b", "c"] {
        served.create(id).await;
        assert_eq!(served.reply(id, "hi").await, "hi");
        served
            .request(
                id,
                &format!(r#"{{"requestId":"bye-{id}","shutdown":{{}}}}"#),
            )
            .await;
    }
    served.create("last").await;
    served.reply("last", "marker").await;
    // What the server said meanwhile (its stderr is read by a thread: give it a moment).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let mut lines = Vec::new();
    while let Ok(line) = served.stderr.try_recv() {
        lines.push(line);
    }
    let noisy: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("loaded") || l.contains("resuming session"))
        .collect();
    assert!(noisy.is_empty(), "{noisy:#?}");
}

#[test]
fn an_unknown_flag_is_told_which_variables_the_command_declares() {
    let (code, stderr) = stderr_of(&["run-command", "examples/echo.yaml", "--nmae", "Ada"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("'--nmae'") && stderr.contains("declares the variables --name"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("-- --nmae"),
        "clap's tip is no help here: {stderr}"
    );
}

#[test]
fn a_command_file_needs_no_description() {
    let dir = tempfile::tempdir().unwrap();
    let file = reel_tests::write_file(dir.path(), "min.yaml", "name: min\nprompt: hello there\n");
    let output = reel(&["run-command", &file, "--output", "text"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "hello there"
    );
}

#[test]
fn a_dsn_naming_a_schema_that_is_not_there_gets_it_created() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    // The test's own schema's name with a suffix: a schema nobody made.
    let fresh_name = format!("{}_fresh", schema.dsn.rsplit("%3D").next().unwrap());
    let dsn = format!("{}_fresh", schema.dsn);
    let output = reel(&[
        "run-command",
        "examples/echo.yaml",
        "--timeline-dsn",
        &dsn,
        "--session-id",
        "s",
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    schema.execute(&format!("DROP SCHEMA IF EXISTS {fresh_name} CASCADE"));
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("creating the schema \"{fresh_name}\"")),
        "{stderr}"
    );
}
