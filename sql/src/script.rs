//! Cutting a SQL script into statements.
//!
//! Owns the one lexical rule every caller shares: a statement ends at a `;` outside string
//! literals, quoted names and comments. It does not parse anything else — statements are
//! handed on as text (to DataFusion's parser, or to the full-text DDL parser).

/// One statement of a script: its text (without the ending `;`), where it starts, and
/// whether a `;` ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptStatement<'a> {
    /// The statement's text, from just after the previous `;` (leading blanks and comments
    /// included) up to, not including, its own `;`.
    pub text: &'a str,
    /// Byte offset of `text` in the script.
    pub offset: usize,
    /// Whether a `;` ended it (false for a last statement without one, or one that ends
    /// inside an unclosed string, quoted name or comment).
    pub terminated: bool,
}

/// Cuts `sql` at every `;` outside strings (`'…'`, doubled quotes escaping), quoted names
/// (`"…"`, `` `…` ``), `--` line comments and `/* … */` comments. Pieces holding only
/// whitespace and closed comments are left out; a piece that ends inside an unclosed
/// string or comment is kept (unterminated), so an interactive reader knows to wait for
/// more lines.
pub fn split_script(sql: &str) -> Vec<ScriptStatement<'_>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    let mut content = false; // anything but blanks and closed comments since `start`
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                content = true;
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        // A doubled quote is an escaped quote.
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                if i >= b.len() {
                    content = true; // unclosed: the statement goes on
                }
                i += 1;
            }
            b';' => {
                if content {
                    out.push(ScriptStatement {
                        text: &sql[start..i],
                        offset: start,
                        terminated: true,
                    });
                }
                start = i + 1;
                content = false;
            }
            c if c.is_ascii_whitespace() => {}
            _ => content = true,
        }
        i += 1;
    }
    if content && start < sql.len() {
        out.push(ScriptStatement { text: &sql[start..], offset: start, terminated: false });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(sql: &str) -> Vec<(&str, bool)> {
        split_script(sql).into_iter().map(|s| (s.text.trim(), s.terminated)).collect()
    }

    #[test]
    fn cuts_at_semicolons_outside_quotes_and_comments() {
        let sql = "SELECT 'a;b', \"x;y\" FROM t; -- c;d\nSELECT 1 /* ; */ ; SELECT `q;`";
        assert_eq!(
            texts(sql),
            vec![
                ("SELECT 'a;b', \"x;y\" FROM t", true),
                ("-- c;d\nSELECT 1 /* ; */", true),
                ("SELECT `q;`", false),
            ]
        );
        let s = split_script(sql);
        assert_eq!(&sql[s[1].offset..s[1].offset + s[1].text.len()], s[1].text);
    }

    #[test]
    fn doubled_quotes_escape() {
        assert_eq!(
            texts("SELECT 'it''s;'; SELECT 2;"),
            vec![("SELECT 'it''s;'", true), ("SELECT 2", true)]
        );
    }

    #[test]
    fn blank_pieces_are_left_out() {
        assert_eq!(texts(" ; -- only a comment\n ; /* closed */ ;;"), vec![]);
        assert_eq!(texts("SELECT 1; -- trailing comment"), vec![("SELECT 1", true)]);
    }

    #[test]
    fn unclosed_strings_and_comments_stay_open() {
        assert_eq!(texts("SELECT 'abc;"), vec![("SELECT 'abc;", false)]);
        assert_eq!(texts("SELECT 1; /* open ;"), vec![("SELECT 1", true), ("/* open ;", false)]);
        assert_eq!(texts("SELECT \"a"), vec![("SELECT \"a", false)]);
    }
}
