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
/// more lines. Linear in the length of `sql`.
pub fn split_script(sql: &str) -> Vec<ScriptStatement<'_>> {
    let mut out = Vec::new();
    let mut scan = ScriptScanner::default();
    let mut start = 0;
    scan.feed(sql, |end| {
        if end.content {
            out.push(ScriptStatement {
                text: &sql[start..end.at],
                offset: start,
                terminated: true,
            });
        }
        start = end.at + 1;
    });
    if scan.is_open() && start < sql.len() {
        out.push(ScriptStatement { text: &sql[start..], offset: start, terminated: false });
    }
    out
}

/// Where [`ScriptScanner::feed`] found a statement's `;`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementEnd {
    /// Byte offset of the `;` in the text fed.
    pub at: usize,
    /// Whether anything but blanks and closed comments came before it (since the last `;`).
    pub content: bool,
}

/// Where the scanner is between two pieces of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Lex {
    #[default]
    Code,
    /// Inside a string or quoted name opened by this quote.
    Quoted(u8),
    /// Just after a closing quote: one more of it makes an escaped quote.
    Closed(u8),
    LineComment,
    BlockComment,
    /// Inside a block comment, just after a `*`.
    BlockStar,
    /// Just after a `-` or `/` that may open a comment.
    Maybe(u8),
}

/// The statement boundaries of [`split_script`], found incrementally: text fed in pieces
/// (lines of a script read one at a time) is scanned once, so a reader that asks after
/// every line whether a statement is complete stays linear in the script's length.
#[derive(Debug, Clone, Default)]
pub struct ScriptScanner {
    lex: Lex,
    /// Anything but blanks and closed comments since the last `;`.
    content: bool,
}

impl ScriptScanner {
    /// Scans `text` (the continuation of what was fed before), calling `on_end` for every
    /// `;` that ends a statement (offsets relative to `text`).
    pub fn feed(&mut self, text: &str, mut on_end: impl FnMut(StatementEnd)) {
        for (i, &c) in text.as_bytes().iter().enumerate() {
            self.step(c, i, &mut on_end);
        }
    }

    fn step(&mut self, c: u8, i: usize, on_end: &mut impl FnMut(StatementEnd)) {
        match self.lex {
            Lex::Quoted(q) => {
                if c == q {
                    self.lex = Lex::Closed(q);
                }
            }
            Lex::Closed(q) if c == q => self.lex = Lex::Quoted(q),
            Lex::LineComment => {
                if c == b'\n' {
                    self.lex = Lex::Code;
                }
            }
            Lex::BlockComment => {
                if c == b'*' {
                    self.lex = Lex::BlockStar;
                }
            }
            Lex::BlockStar => {
                self.lex = match c {
                    b'/' => Lex::Code,
                    b'*' => Lex::BlockStar,
                    _ => Lex::BlockComment,
                }
            }
            Lex::Maybe(b'-') if c == b'-' => self.lex = Lex::LineComment,
            Lex::Maybe(b'/') if c == b'*' => self.lex = Lex::BlockComment,
            Lex::Maybe(_) => {
                // Not a comment after all: the first character was content.
                self.lex = Lex::Code;
                self.content = true;
                self.step(c, i, on_end);
            }
            Lex::Closed(_) | Lex::Code => {
                self.lex = Lex::Code;
                match c {
                    b'\'' | b'"' | b'`' => {
                        self.content = true;
                        self.lex = Lex::Quoted(c);
                    }
                    b'-' | b'/' => self.lex = Lex::Maybe(c),
                    b';' => {
                        on_end(StatementEnd { at: i, content: self.content });
                        self.content = false;
                    }
                    c if c.is_ascii_whitespace() => {}
                    _ => self.content = true,
                }
            }
        }
    }

    /// Whether a statement is open: content since the last `;`, or an unclosed string,
    /// quoted name or block comment.
    pub fn is_open(&self) -> bool {
        self.content
            || matches!(self.lex, Lex::Quoted(_) | Lex::BlockComment | Lex::BlockStar)
            || matches!(self.lex, Lex::Maybe(_))
    }

    /// Forgets everything fed so far.
    pub fn reset(&mut self) {
        *self = ScriptScanner::default();
    }
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

    /// The incremental scanner finds the boundaries `split_script` finds, however the
    /// text is cut into pieces.
    #[test]
    fn feeding_in_pieces_finds_the_same_boundaries() {
        let sql = "SELECT 'it''s;', \"a;\" -- c;\n; /* x ; * / */ SELECT 1 - 2 / 3;\nSELECT `q;`";
        let whole: Vec<usize> = split_script(sql)
            .iter()
            .filter(|s| s.terminated)
            .map(|s| s.offset + s.text.len())
            .collect();
        for cut in 1..sql.len() {
            if !sql.is_char_boundary(cut) {
                continue;
            }
            let mut scan = ScriptScanner::default();
            let mut ends = Vec::new();
            scan.feed(&sql[..cut], |e| {
                if e.content {
                    ends.push(e.at)
                }
            });
            scan.feed(&sql[cut..], |e| {
                if e.content {
                    ends.push(cut + e.at)
                }
            });
            assert_eq!(ends, whole, "cut at {cut}");
            assert!(scan.is_open(), "the last statement has no ';'");
        }
    }

    #[test]
    fn unclosed_strings_and_comments_stay_open() {
        assert_eq!(texts("SELECT 'abc;"), vec![("SELECT 'abc;", false)]);
        assert_eq!(texts("SELECT 1; /* open ;"), vec![("SELECT 1", true), ("/* open ;", false)]);
        assert_eq!(texts("SELECT \"a"), vec![("SELECT \"a", false)]);
    }
}
