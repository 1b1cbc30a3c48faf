//! Random byte lines through the whole request path (line reader, parser, session server):
//! no panic, exactly one error frame per bad line, every good line after bad ones answered, and
//! the reader never returns more than its limit.

use proptest::prelude::*;
use reel_engine::{Fanout, MemorySink, ModelSettings, OutputKind, ServeConfig, Session, serve};
use reel_providers::ScriptedProvider;
use tokio_util::sync::CancellationToken;

use super::{LineReader, read_requests};
use crate::bounded_lines::Line;

/// A small limit, so that long lines are cheap to generate.
const LIMIT: usize = 256;

/// A line that is never a valid request, whatever its random part.
fn bad_line() -> impl Strategy<Value = Vec<u8>> {
    let random = prop::collection::vec(
        any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
        0..64,
    );
    prop_oneof![
        // Not JSON: '#' cannot start a JSON value.
        random
            .clone()
            .prop_map(|tail| [b"#".as_slice(), &tail].concat()),
        // Too long.
        (LIMIT + 1..LIMIT * 4).prop_map(|n| vec![b'{'; n]),
        // Deep nesting.
        (1usize..200).prop_map(|depth| "[".repeat(depth * 100).into_bytes()),
        // Invalid UTF-8 inside a string.
        random.clone().prop_map(|tail| [
            br#"{"requestId":"x","submit":{"prompt":""#.as_slice(),
            &[0xff],
            &tail,
            b"\"}}"
        ]
        .concat()),
        // A NUL between fields.
        Just(b"{\"snapshot\":{},\0\"requestId\":\"n\"}".to_vec()),
        // Valid JSON of the wrong shape, or an unknown request kind, or an empty prompt.
        "[a-z]{1,8}".prop_map(|kind| format!(r#"{{"requestId":"k","{kind}x":{{}}}}"#).into_bytes()),
        "[ ]{0,3}".prop_map(|p| format!(r#"{{"submit":{{"prompt":"{p}"}}}}"#).into_bytes()),
        Just(br#"{"submit":"text"}"#.to_vec()),
        (2u32..1000).prop_map(|v| format!(r#"{{"version":{v},"snapshot":{{}}}}"#).into_bytes()),
    ]
}

/// Bad lines and good snapshot requests, shuffled; good ones are numbered.
fn lines() -> impl Strategy<Value = Vec<Option<Vec<u8>>>> {
    prop::collection::vec(
        prop_oneof![3 => bad_line().prop_map(Some), 1 => Just(None)],
        1..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if std::env::var_os("CI").is_some() { 128 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn bad_lines_get_one_error_each_and_good_lines_still_work(lines in lines()) {
        let mut input = Vec::new();
        let mut bad = 0;
        let mut good = Vec::new();
        for (at, line) in lines.iter().enumerate() {
            match line {
                Some(bytes) => {
                    input.extend_from_slice(bytes);
                    bad += 1;
                }
                None => {
                    input.extend_from_slice(format!(r#"{{"requestId":"good-{at}","snapshot":{{}}}}"#).as_bytes());
                    good.push(format!("good-{at}"));
                }
            }
            input.push(b'\n');
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let memory = MemorySink::new();
        runtime.block_on(async {
            let mut fanout = Fanout::new();
            fanout.attach(Box::new(memory.clone()));
            let provider = ScriptedProvider::echo();
            let config = ServeConfig { id_fixed: false, provider: &provider, system_prompt: None, settings: ModelSettings::default(), approver: None, tools: &reel_engine::NO_TOOLS, budgets: Default::default(), context_policy: Default::default(), idle: Default::default() };
            let requests = read_requests(std::io::Cursor::new(input), LIMIT);
            let (session, _) = serve(Session::new("s", fanout), config, requests, CancellationToken::new()).await;
            assert!(session.close().await.is_empty());
        });
        let outputs = memory.outputs();
        let errors = outputs.iter().filter(|o| matches!(o.kind, OutputKind::Error(_))).count();
        prop_assert_eq!(errors, bad, "exactly one error frame per bad line");
        for rid in &good {
            let done = outputs.iter().find_map(|o| match &o.kind {
                OutputKind::Done(done) if &*o.request_id == rid.as_str() => Some(done.status.clone()),
                _ => None,
            });
            prop_assert_eq!(done.as_deref(), Some("ok"), "{} was answered", rid);
        }
    }

    #[test]
    fn the_reader_returns_lines_whole_or_skips_them(
        lines in prop::collection::vec(prop::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..LIMIT * 3), 0..20),
        chunk in 1usize..64,
    ) {
        let mut input = Vec::new();
        for line in &lines {
            input.extend_from_slice(line);
            input.push(b'\n');
        }
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let read = runtime.block_on(async {
            // A tiny read buffer makes lines arrive in many pieces.
            let mut reader = LineReader::new(tokio::io::BufReader::with_capacity(chunk, std::io::Cursor::new(input)), LIMIT);
            let mut read = Vec::new();
            while let Some(line) = reader.next_line().await.unwrap() {
                read.push(line);
            }
            read
        });
        prop_assert_eq!(read.len(), lines.len());
        for (line, got) in lines.iter().zip(read) {
            if line.len() > LIMIT {
                let prefix = line[..line.len().min(1024)].to_vec();
                prop_assert_eq!(got, Line::TooLarge { bytes: line.len() as u64, prefix });
            } else {
                let mut expected = line.clone();
                if expected.last() == Some(&b'\r') {
                    expected.pop();
                }
                prop_assert_eq!(got, Line::Text { bytes: expected, complete: true });
            }
        }
    }
}
