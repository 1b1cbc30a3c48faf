//! reel never destroys a file that is not its own: an export onto a device, a FIFO, a symlink
//! or the database itself; a debug file onto a database or a command file; another program's
//! SQLite database; and read-only commands never create, migrate or change a database.

use std::{
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::Path,
    process::{Command, Output},
};

use reel_tests::{reel, repo_root, run};

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A database holding session `w` (the weather example: a tool round).
fn weather_db(dir: &Path) -> String {
    let db = dir.join("t.db").display().to_string();
    let made = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--session-id",
        "w",
        "--timeline-db",
        &db,
    ]);
    assert!(made.status.success(), "{}", stderr(&made));
    db
}

/// `reel ARGS` run by `sh` with `umask` set first.
fn reel_with_umask(umask: &str, args: &[&str]) -> Output {
    let binary = reel_tests::reel_binary();
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask {umask}; exec '{}' {}",
            binary.display(),
            quoted.join(" ")
        ))
        .current_dir(repo_root())
        .output()
        .unwrap()
}

#[test]
fn an_export_onto_a_device_or_a_fifo_writes_into_it_and_leaves_it_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = weather_db(dir.path());
    let exported = run(&[
        "export",
        "w",
        "--format",
        "markdown",
        "-o",
        "/dev/null",
        "--timeline-db",
        &db,
    ]);
    assert!(exported.status.success(), "{}", stderr(&exported));
    let null = std::fs::metadata("/dev/null").unwrap();
    assert!(
        null.file_type().is_char_device(),
        "/dev/null is still a device"
    );

    let fifo = dir.path().join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let exported = run(&[
        "export",
        "w",
        "--format",
        "markdown",
        "-o",
        fifo.to_str().unwrap(),
        "--timeline-db",
        &db,
    ]);
    assert!(exported.status.success(), "{}", stderr(&exported));
    let read = reader.join().unwrap();
    assert!(
        read.starts_with("# What is the weather in Paris?"),
        "{read}"
    );
    assert!(
        std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
        "still a FIFO"
    );
}

#[test]
fn an_export_follows_a_symlink_and_keeps_modes() {
    let dir = tempfile::tempdir().unwrap();
    let db = weather_db(dir.path());
    let target = dir.path().join("target.md");
    std::fs::write(&target, "old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link.md");
    std::os::unix::fs::symlink("target.md", &link).unwrap();
    let exported = run(&[
        "export",
        "w",
        "--format",
        "markdown",
        "-o",
        link.to_str().unwrap(),
        "--timeline-db",
        &db,
    ]);
    assert!(exported.status.success(), "{}", stderr(&exported));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link is still a link"
    );
    assert!(
        std::fs::read_to_string(&target)
            .unwrap()
            .starts_with("# What is the weather")
    );
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "a replaced file keeps its mode");

    // A new file gets what the umask allows, as `>` would.
    for (umask, expected) in [("022", 0o644), ("077", 0o600), ("002", 0o664)] {
        let out = dir.path().join(format!("new-{umask}.html"));
        let exported = reel_with_umask(
            umask,
            &[
                "export",
                "w",
                "--format",
                "html",
                "-o",
                out.to_str().unwrap(),
                "--timeline-db",
                &db,
            ],
        );
        assert!(exported.status.success(), "{}", stderr(&exported));
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, expected, "umask {umask}");
    }
}

#[test]
fn an_export_onto_the_database_or_a_directory_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = weather_db(dir.path());
    let before = std::fs::read(&db).unwrap();
    let link = dir.path().join("db-link");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    let spelled_otherwise = dir.path().join(".").join("t.db");
    let wal = format!("{db}-wal");
    for path in [
        db.as_str(),
        link.to_str().unwrap(),
        spelled_otherwise.to_str().unwrap(),
        &wal,
    ] {
        let exported = run(&[
            "export",
            "w",
            "--format",
            "jsonl",
            "-o",
            path,
            "--timeline-db",
            &db,
        ]);
        assert_eq!(exported.status.code(), Some(1), "{path}");
        assert!(
            stderr(&exported).contains("timeline database"),
            "{}",
            stderr(&exported)
        );
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the database is as it was"
    );
    let listed = run(&["sessions", "--json", "--timeline-db", &db]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("\"w\""));

    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let exported = run(&[
        "export",
        "w",
        "--format",
        "jsonl",
        "-o",
        folder.to_str().unwrap(),
        "--timeline-db",
        &db,
    ]);
    assert_eq!(exported.status.code(), Some(1));
    assert!(folder.is_dir());
}

#[test]
fn a_debug_file_never_truncates_a_file_the_command_uses() {
    let dir = tempfile::tempdir().unwrap();
    let db = weather_db(dir.path());
    let before = std::fs::read(&db).unwrap();
    let command = dir.path().join("cmd.yaml");
    std::fs::copy(repo_root().join("examples/echo.yaml"), &command).unwrap();
    let command_text = std::fs::read(&command).unwrap();
    let turns = dir.path().join("turns.db");
    let cases: Vec<(String, &str)> = vec![
        (db.clone(), "timeline database"),
        (
            dir.path().join("./t.db").display().to_string(),
            "timeline database",
        ),
        (format!("{db}-wal"), "timeline database"),
        (turns.display().to_string(), "turns database"),
        (command.display().to_string(), "command file"),
    ];
    for (debug, what) in cases {
        let output = run(&[
            "run-command",
            command.to_str().unwrap(),
            "--rpc",
            "--session-id",
            "w",
            "--resume",
            "--timeline-db",
            &db,
            "--turns-db",
            turns.to_str().unwrap(),
            "--debug-events-jsonl",
            &debug,
        ]);
        assert_eq!(output.status.code(), Some(1), "{debug}");
        let err = stderr(&output);
        assert!(
            err.contains(what) && err.contains("choose another path"),
            "{err}"
        );
        let frames = reel_tests::parse_frames(&output.stdout);
        reel_tests::assert_stream_shape(&frames);
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "all sessions are still there"
    );
    assert_eq!(std::fs::read(&command).unwrap(), command_text);
    assert!(!turns.exists(), "nothing was created either");
}

/// A SQLite database of another program: a table of its own, rollback journal.
fn foreign_database(path: &Path) {
    reel_tests::python_sqlite(
        "c = sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)'); c.execute(\"INSERT INTO users (name) VALUES ('ada')\"); c.commit()",
        &[path.as_os_str()],
    );
}

#[test]
fn another_programs_database_is_refused_by_every_command_and_left_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("app.db");
    foreign_database(&foreign);
    let before = std::fs::read(&foreign).unwrap();
    let db = foreign.to_str().unwrap();
    let attempts: Vec<Vec<&str>> = vec![
        vec!["sessions", "--timeline-db", db],
        vec!["show", "s", "--timeline-db", db],
        vec!["export", "s", "--format", "jsonl", "--timeline-db", db],
        vec!["verify", "s", "--timeline-db", db],
        vec!["tail", "s", "--timeline-db", db],
        vec![
            "run-command",
            "examples/echo.yaml",
            "--session-id",
            "s",
            "--timeline-db",
            db,
        ],
        vec![
            "run-command",
            "examples/echo.yaml",
            "--session-id",
            "s",
            "--turns-db",
            db,
        ],
    ];
    for args in attempts {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let err = stderr(&output);
        assert!(
            err.contains("not a reel timeline database") && err.contains("left untouched"),
            "{args:?}: {err}"
        );
        assert!(err.contains("users"), "names what is there: {err}");
    }
    assert_eq!(std::fs::read(&foreign).unwrap(), before, "byte for byte");
    let beside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(beside, ["app.db"], "no -wal or -shm was made beside it");
}

#[test]
fn read_only_commands_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("sub/missing.db");
    let path = missing.to_str().unwrap();
    for args in [
        vec!["sessions", "--timeline-db", path],
        vec!["show", "s", "--timeline-db", path],
        vec!["export", "s", "--format", "html", "--timeline-db", path],
        vec!["verify", "s", "--timeline-db", path],
        vec!["tail", "s", "--timeline-db", path],
        vec![
            "fork",
            "s",
            "--at",
            "1",
            "--new-session",
            "t",
            "--timeline-db",
            path,
        ],
        vec!["rm", "s", "--timeline-db", path],
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&output).contains("no timeline database at"),
            "{}",
            stderr(&output)
        );
    }
    assert!(!dir.path().join("sub").exists(), "not even its folder");

    // The default database on a fresh machine: the list is empty, nothing is created, and a
    // session lookup names where it looked and how to look elsewhere.
    let data = dir.path().join("data");
    let listed = reel(&["sessions"])
        .env("XDG_DATA_HOME", &data)
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(String::from_utf8_lossy(&listed.stdout).starts_with("SESSION"));
    let json = reel(&["sessions", "--json"])
        .env("XDG_DATA_HOME", &data)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&json.stdout).trim(), "[]");
    let shown = reel(&["show", "notes"])
        .env("XDG_DATA_HOME", &data)
        .output()
        .unwrap();
    assert_eq!(shown.status.code(), Some(1));
    let err = stderr(&shown);
    assert!(
        err.contains(&data.join("reel/timeline.db").display().to_string()),
        "{err}"
    );
    assert!(err.contains("--timeline-db PATH"), "{err}");
    assert!(!data.exists(), "nothing was created");
}

/// A timeline database as an older reel left it: the first four migrations applied (by sqlx's
/// own rules: the SQL run, `_sqlx_migrations` rows with each file's SHA-384).
fn older_reel_database(path: &Path) {
    let script = r#"
import hashlib, pathlib
c = sqlite3.connect(sys.argv[1])
c.execute("CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)")
for f in sorted(pathlib.Path(sys.argv[2]).glob("000[1-4]_*.sql")):
    sql = f.read_text()
    c.executescript(sql)
    version, description = f.stem.split("_", 1)
    c.execute("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (?, ?, 1, ?, 0)",
              (int(version), description.replace("_", " "), hashlib.sha384(sql.encode()).digest()))
c.commit()
"#;
    let migrations = repo_root().join("migrations/sqlite");
    reel_tests::python_sqlite(script, &[path.as_os_str(), migrations.as_os_str()]);
}

#[test]
fn an_older_reels_database_is_read_only_after_a_writing_command_upgrades_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    older_reel_database(&path);
    let before = std::fs::read(&path).unwrap();
    let db = path.to_str().unwrap();
    let listed = run(&["sessions", "--timeline-db", db]);
    assert_eq!(listed.status.code(), Some(1));
    assert!(
        stderr(&listed).contains("older reel"),
        "{}",
        stderr(&listed)
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a read-only command changed nothing"
    );

    let wrote = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "s",
        "--timeline-db",
        db,
    ]);
    assert!(
        wrote.status.success(),
        "a writing command migrates reel's own: {}",
        stderr(&wrote)
    );
    let listed = run(&["sessions", "--json", "--timeline-db", db]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("\"s\""));
}

#[test]
fn a_mistyped_dsn_is_an_error_never_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let echo = repo_root().join("examples/echo.yaml");
    let echo = echo.to_str().unwrap();
    for args in [
        vec![
            "run-command",
            echo,
            "--session-id",
            "s",
            "--timeline-dsn",
            "postgress://postgres@127.0.0.1:5432/test",
        ],
        vec!["sessions", "--timeline-dsn", "mysql://root@127.0.0.1/test"],
        vec![
            "run-command",
            echo,
            "--session-id",
            "s",
            "--turns-dsn",
            "/tmp/not-a-dsn.db",
        ],
    ] {
        let output = reel(&args).current_dir(dir.path()).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let err = stderr(&output);
        assert!(
            err.contains("postgres://") && err.contains("sqlite://"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no file was made"
    );
}
