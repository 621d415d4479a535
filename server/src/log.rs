//! Structured logs: one JSON object per line on stdout, `level` and `msg`
//! first, then the fields in the order given, written whole under stdout's
//! lock so lines never interleave.

use std::io::Write;

use serde_json::Value;

/// Writes `{"level":…,"msg":…, fields…}` as one line on stdout.
pub fn line(level: &str, msg: &str, fields: &[(&str, Value)]) {
    let text = render(level, msg, fields);
    let mut out = std::io::stdout().lock();
    // A closed stdout must not take the server down: the line is lost.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The line, newline included.
fn render(level: &str, msg: &str, fields: &[(&str, Value)]) -> String {
    let mut text = format!("{{\"level\":{},\"msg\":{}", Value::from(level), Value::from(msg));
    for (k, v) in fields {
        text.push_str(&format!(",{}:{}", Value::from(*k), v));
    }
    text.push_str("}\n");
    text
}

/// An `info` line.
pub fn info(msg: &str, fields: &[(&str, Value)]) {
    line("info", msg, fields)
}

/// A `warn` line.
pub fn warn(msg: &str, fields: &[(&str, Value)]) {
    line("warn", msg, fields)
}

/// An `error` line.
pub fn error(msg: &str, fields: &[(&str, Value)]) {
    line("error", msg, fields)
}

#[cfg(test)]
mod tests {
    #[test]
    fn level_and_msg_come_first_then_the_fields_in_order() {
        let fields = [("grpc", "127.0.0.1:1".into()), ("http", "127.0.0.1:2".into())];
        assert_eq!(
            super::render("info", "listening", &fields),
            "{\"level\":\"info\",\"msg\":\"listening\",\"grpc\":\"127.0.0.1:1\",\"http\":\"127.0.0.1:2\"}\n"
        );
        assert_eq!(
            super::render("error", "a \"quoted\"\nmsg", &[("n", 3.into())]),
            "{\"level\":\"error\",\"msg\":\"a \\\"quoted\\\"\\nmsg\",\"n\":3}\n"
        );
    }
}
