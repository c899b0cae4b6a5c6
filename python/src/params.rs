//! Parameter markers: PEP 249's `qmark` (`?`) and `numeric` (`:1`) styles rewritten to the
//! engine's `$1`, `$2`, … outside string literals, quoted names and comments. Used for every
//! statement run with parameters; it must not change any other character of the text.

/// `sql` with `?` → `$n` (numbered in order), `?n` and `:n` → `$n`; `$n` is kept. Returns the
/// text and the highest parameter number it refers to.
pub fn rewrite(sql: &str) -> (String, usize) {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 0usize;
    let mut highest = 0usize;
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"' | b'`') => {
                // Quoted: up to the closing quote; a doubled quote is part of the text.
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == q {
                        if bytes.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'?' | b':' if bytes[i] == b'?' || numeric_marker(bytes, i) => {
                // `?` alone takes the next number; `?N` and `:N` name theirs.
                let digits = count_digits(&bytes[i + 1..]);
                let n = if digits > 0 {
                    sql[i + 1..i + 1 + digits].parse().unwrap_or(usize::MAX)
                } else {
                    next += 1;
                    next
                };
                out.push_str(&sql[copied..i]);
                out.push('$');
                out.push_str(&n.to_string());
                highest = highest.max(n);
                i += 1 + digits;
                copied = i;
            }
            b'$' => {
                let digits = count_digits(&bytes[i + 1..]);
                if digits > 0 {
                    let n: usize = sql[i + 1..i + 1 + digits].parse().unwrap_or(usize::MAX);
                    highest = highest.max(n);
                }
                i += 1 + digits;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied.min(sql.len())..]);
    (out, highest)
}

fn count_digits(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// A `:` starts a numeric marker when digits follow and it does not continue a name, a
/// number, a closing bracket or another `:` (`a::int`, `x[1:2]` are left alone).
fn numeric_marker(b: &[u8], i: usize) -> bool {
    if count_digits(&b[i + 1..]) == 0 {
        return false;
    }
    let before = b[..i].iter().rev().find(|c| !c.is_ascii_whitespace());
    !matches!(before, Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'_' | b']' | b')' | b':' | b'\'' | b'"'))
}

/// A plain insert of one row of parameters, as `executemany` can load in one batch:
/// `INSERT INTO table [(columns)] VALUES ($1, $2, …, $n)` (the text after [`rewrite`]),
/// nothing else (no expressions, `ON CONFLICT`, `RETURNING`, `SELECT`). Returns the table
/// and the named columns (empty: the table's columns in order) as written, each with
/// whether it was quoted; `None` for any other statement.
pub fn plain_insert(sql: &str) -> Option<PlainInsert> {
    let mut p = Lexer { s: sql.trim().trim_end_matches(';').trim_end(), at: 0 };
    p.word("INSERT")?;
    p.word("INTO")?;
    let table = p.ident()?;
    let mut columns = Vec::new();
    if p.punct('(') {
        loop {
            columns.push(p.ident()?);
            if p.punct(')') {
                break;
            }
            p.punct(',').then_some(())?;
        }
    }
    p.word("VALUES")?;
    p.punct('(').then_some(())?;
    let mut n = 0;
    loop {
        n += 1;
        p.skip_ws();
        let rest = &p.s[p.at..];
        let digits = rest.strip_prefix('$')?;
        let len = digits.bytes().take_while(u8::is_ascii_digit).count();
        (digits[..len].parse::<usize>().ok()? == n).then_some(())?;
        p.at += 1 + len;
        if p.punct(')') {
            break;
        }
        p.punct(',').then_some(())?;
    }
    p.skip_ws();
    (p.at == p.s.len() && (columns.is_empty() || columns.len() == n)).then_some(PlainInsert {
        table,
        columns,
        params: n,
    })
}

/// What [`plain_insert`] recognised.
#[derive(Debug, PartialEq, Eq)]
pub struct PlainInsert {
    /// The table: its name and whether it was quoted.
    pub table: (String, bool),
    /// The named columns (empty: all, in order).
    pub columns: Vec<(String, bool)>,
    /// How many parameters (`$1` … `$n`, in order).
    pub params: usize,
}

struct Lexer<'a> {
    s: &'a str,
    at: usize,
}

impl Lexer<'_> {
    fn skip_ws(&mut self) {
        let rest = &self.s[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    /// A keyword (any case) followed by a non-word character.
    fn word(&mut self, w: &str) -> Option<()> {
        self.skip_ws();
        let rest = &self.s.as_bytes()[self.at..];
        let ok = rest.len() >= w.len()
            && rest[..w.len()].eq_ignore_ascii_case(w.as_bytes())
            && rest.get(w.len()).is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
        ok.then(|| self.at += w.len())
    }

    fn punct(&mut self, c: char) -> bool {
        self.skip_ws();
        let hit = self.s[self.at..].starts_with(c);
        if hit {
            self.at += c.len_utf8();
        }
        hit
    }

    /// A bare name (letters, digits, `_`; not starting with a digit) or a `"quoted"` one.
    fn ident(&mut self) -> Option<(String, bool)> {
        self.skip_ws();
        let rest = &self.s[self.at..];
        if let Some(q) = rest.strip_prefix('"') {
            let mut name = String::new();
            let mut chars = q.char_indices();
            while let Some((i, c)) = chars.next() {
                if c == '"' {
                    if q[i + 1..].starts_with('"') {
                        name.push('"');
                        chars.next();
                        continue;
                    }
                    self.at += 1 + i + 1;
                    return (!name.is_empty()).then_some((name, true));
                }
                name.push(c);
            }
            return None;
        }
        let len = rest.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
        if len == 0 || rest.as_bytes()[0].is_ascii_digit() {
            return None;
        }
        self.at += len;
        Some((rest[..len].to_string(), false))
    }
}

/// The first word of a statement, upper-cased (`SELECT`, `INSERT`, …).
pub fn first_word(sql: &str) -> String {
    sql.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase()
}
