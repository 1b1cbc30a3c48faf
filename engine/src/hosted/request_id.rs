//! Finds a request line's `requestId` without parsing the whole line, so that a line that is
//! wrong in any other way (invalid UTF-8 in a prompt, nesting past the parser's limit, a NUL
//! between fields, an unknown request kind, trailing garbage) still gets its error frame under
//! the id its client waits for.
//!
//! The scan walks the top-level object's keys byte by byte, skipping every value it does not
//! need with a depth counter (no recursion, so no nesting can exhaust the stack), and decodes
//! only the id's own string token with serde_json. It reads at most the line; it allocates only
//! the id.

/// The id of the line's top-level `"requestId"` (or `"request_id"`), when it can be read.
pub fn find_request_id(line: &[u8]) -> Option<String> {
    let mut scan = Scan { line, at: 0 };
    scan.blank();
    if !scan.eat(b'{') {
        return None;
    }
    loop {
        scan.blank();
        let key = scan.string()?;
        scan.blank();
        if !scan.eat(b':') {
            return None;
        }
        scan.blank();
        if key == b"\"requestId\"" || key == b"\"request_id\"" {
            let token = scan.string()?;
            return serde_json::from_slice::<String>(token).ok();
        }
        scan.value()?;
        scan.blank();
        if !scan.eat(b',') {
            return None;
        }
    }
}

/// A cursor over the line.
struct Scan<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.line.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    /// Skips whitespace, and stray control bytes (a NUL between fields) with it.
    fn blank(&mut self) {
        while self.peek().is_some_and(|b| b <= b' ') {
            self.at += 1;
        }
    }

    /// A string token, quotes included; its bytes need not be valid UTF-8.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        if !self.eat(b'"') {
            return None;
        }
        loop {
            match self.peek()? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return Some(&self.line[start..self.at]);
                }
                _ => self.at += 1,
            }
        }
    }

    /// Skips one value of any kind and depth.
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                while self
                    .peek()
                    .is_some_and(|b| !matches!(b, b',' | b'}' | b']'))
                {
                    self.at += 1;
                }
                Some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::find_request_id;
    use proptest::prelude::*;

    fn id(line: &[u8]) -> Option<String> {
        find_request_id(line)
    }

    #[test]
    fn ids_are_found_whatever_else_is_wrong() {
        let cases: &[&[u8]] = &[
            br#"{"requestId":"x","submit":{"prompt":"hi"}}"#,
            b"{\"requestId\":\"x\",\"submit\":{\"prompt\":\"\xff\xfe\"}}",
            b"{\"submit\":{\"prompt\":\"\xff\"},\"requestId\":\"x\"}",
            b"{\"snapshot\":{},\0\"requestId\":\"x\"}",
            br#"{"version":99999999999999,"requestId":"x"}"#,
            br#"{"submit":{"prompt":[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]},"requestId":"x"} trailing"#,
            br#"{"unknown":{"a":"}{]["},"request_id":"x"}"#,
            br#"  { "requestId" : "x" "#,
        ];
        for line in cases {
            assert_eq!(
                id(line).as_deref(),
                Some("x"),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let deep = format!(
            r#"{{"submit":{}{},"requestId":"x"}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(id(deep.as_bytes()).as_deref(), Some("x"));
        assert_eq!(
            id(br#"{"requestId":"a\"b\u00e9"}"#).as_deref(),
            Some("a\"bé")
        );
    }

    #[test]
    fn no_id_where_none_can_be_read() {
        for line in [
            &b"oops"[..],
            br#"{"requestId":7}"#,
            br#"{"submit":{"prompt":"x"}}"#,
            br#"{"requestId":"unterminated"#,
            b"{\"requestId\":\"\xff\"}",
            br#"[{"requestId":"x"}]"#,
        ] {
            assert_eq!(id(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_scanned_without_a_panic(line in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = find_request_id(&line);
        }

        #[test]
        fn an_id_before_random_bytes_is_found(rest in prop::collection::vec(any::<u8>(), 0..256)) {
            let mut line = br#"{"requestId":"r-1","#.to_vec();
            line.extend_from_slice(&rest);
            let found = find_request_id(&line);
            prop_assert_eq!(found.as_deref(), Some("r-1"));
        }
    }
}
