//! Output: the Markdown table, the JSON file and the scoreboard (wins / ties / losses and a
//! geometric mean of Basalt / best-other per group).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::engines::Kind;
use crate::metrics::Group;

/// Basalt is said to win when its figure is below this fraction of the best other engine's,
/// to lose above its inverse; in between is a tie (timer and machine noise).
pub const TIE_BAND: f64 = 0.02;

/// One engine's outcome on one metric.
#[derive(Debug, Clone)]
pub enum Cell {
    /// Seconds per operation.
    Secs(f64),
    /// Not applicable, and why.
    Na(String),
    /// The engine failed.
    Error(String),
}

/// One row of the report.
#[derive(Debug, Clone)]
pub struct Line {
    /// Metric id.
    pub id: String,
    /// Title.
    pub name: String,
    /// Group.
    pub group: Group,
    /// Mode label.
    pub mode: &'static str,
    /// Counted in the scoreboard.
    pub ranked: bool,
    /// Per engine.
    pub cells: BTreeMap<Kind, Cell>,
    /// Cross-check failure, if any.
    pub mismatch: Option<String>,
}

/// Verdict of one ranked line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Basalt faster.
    Win,
    /// Within the tie band.
    Tie,
    /// Basalt slower.
    Loss,
}

impl Line {
    fn secs(&self, k: Kind) -> Option<f64> {
        match self.cells.get(&k) {
            Some(Cell::Secs(s)) => Some(*s),
            _ => None,
        }
    }

    /// Basalt / best other engine.
    pub fn ratio(&self) -> Option<f64> {
        let b = self.secs(Kind::Basalt)?;
        let best = [Kind::Sqlite, Kind::Duckdb]
            .iter()
            .filter_map(|k| self.secs(*k))
            .min_by(f64::total_cmp)?;
        Some(b / best)
    }

    /// The scoreboard verdict.
    pub fn verdict(&self) -> Option<Verdict> {
        let r = self.ratio()?;
        Some(if r < 1.0 - TIE_BAND {
            Verdict::Win
        } else if r > 1.0 / (1.0 - TIE_BAND) {
            Verdict::Loss
        } else {
            Verdict::Tie
        })
    }
}

/// Formats seconds with a unit fitting their size.
pub fn fmt_secs(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn fmt_cell(c: Option<&Cell>) -> String {
    match c {
        Some(Cell::Secs(s)) => fmt_secs(*s),
        Some(Cell::Na(_)) => "N/A".into(),
        Some(Cell::Error(_)) => "ERROR".into(),
        None => "—".into(),
    }
}

/// The scoreboard.
pub struct Score {
    /// Wins.
    pub wins: usize,
    /// Ties.
    pub ties: usize,
    /// Losses.
    pub losses: usize,
    /// Ranked metrics where Basalt or every peer had no figure.
    pub unranked: usize,
    /// Geometric mean of Basalt / best other per group, with the number of metrics.
    pub groups: Vec<(Group, f64, usize)>,
}

/// Computes the scoreboard over ranked lines.
pub fn score(lines: &[Line]) -> Score {
    let mut s = Score { wins: 0, ties: 0, losses: 0, unranked: 0, groups: Vec::new() };
    let mut logs: BTreeMap<Group, (f64, usize)> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.ranked) {
        match (l.verdict(), l.ratio()) {
            (Some(v), Some(r)) => {
                match v {
                    Verdict::Win => s.wins += 1,
                    Verdict::Tie => s.ties += 1,
                    Verdict::Loss => s.losses += 1,
                }
                let g = logs.entry(l.group).or_default();
                g.0 += r.ln();
                g.1 += 1;
            }
            _ => s.unranked += 1,
        }
    }
    s.groups = logs.into_iter().map(|(g, (sum, n))| (g, (sum / n as f64).exp(), n)).collect();
    s
}

/// The Markdown report.
pub fn markdown(title: &str, meta: &[(String, String)], lines: &[Line], kinds: &[Kind]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {title}\n");
    for (k, v) in meta {
        let _ = writeln!(o, "- {k}: {v}");
    }
    let sc = score(lines);
    let _ = writeln!(
        o,
        "\n## Scoreboard\n\nBasalt vs the best other engine per metric (win: ratio < {:.2}; tie: \
         within ±{:.0}%): **{} wins, {} ties, {} losses** over {} ranked metrics with figures \
         ({} ranked metrics without a Basalt or peer figure).\n",
        1.0 - TIE_BAND,
        TIE_BAND * 100.0,
        sc.wins,
        sc.ties,
        sc.losses,
        sc.wins + sc.ties + sc.losses,
        sc.unranked
    );
    let _ = writeln!(o, "| Group | Metrics | Geometric mean Basalt / best |\n|---|--:|--:|");
    for (g, gm, n) in &sc.groups {
        let _ = writeln!(o, "| {} | {n} | {gm:.3} |", g.name());
    }
    let _ = writeln!(o, "\n## Metrics\n");
    let mut head = String::from("| Metric | Name | Mode |");
    let mut rule = String::from("|---|---|---|");
    for k in kinds {
        let _ = write!(head, " {} |", k.name());
        rule.push_str("--:|");
    }
    head.push_str(" Basalt / best | |");
    rule.push_str("--:|---|");
    let _ = writeln!(o, "{head}\n{rule}");
    for l in lines {
        let mut row = format!("| {} | {} | {} |", l.id, l.name, l.mode);
        for k in kinds {
            let _ = write!(row, " {} |", fmt_cell(l.cells.get(k)));
        }
        let ratio = l.ratio().map(|r| format!("{r:.3}")).unwrap_or_else(|| "—".into());
        let verdict = match (l.ranked, l.verdict()) {
            (false, _) => "diagnostic",
            (true, Some(Verdict::Win)) => "win",
            (true, Some(Verdict::Tie)) => "tie",
            (true, Some(Verdict::Loss)) => "**loss**",
            (true, None) => "",
        };
        let _ = writeln!(row, " {ratio} | {verdict} |");
        o.push_str(&row);
    }
    let notes: Vec<String> = lines
        .iter()
        .flat_map(|l| {
            l.cells.iter().filter_map(move |(k, c)| match c {
                Cell::Na(why) => Some(format!("- {} {}: N/A — {why}", l.id, k.name())),
                Cell::Error(e) => Some(format!("- {} {}: ERROR — {e}", l.id, k.name())),
                _ => None,
            })
        })
        .chain(lines.iter().filter_map(|l| {
            l.mismatch.as_ref().map(|m| format!("- {}: RESULT MISMATCH — {m}", l.id))
        }))
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(o, "\n## Notes\n\n{}", notes.join("\n"));
    }
    o
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:e}"),
        _ => "null".into(),
    }
}

/// The JSON report: metadata, every line with each engine's seconds, and the scoreboard.
pub fn json(meta: &[(String, String)], lines: &[Line], extra: &[(String, String)]) -> String {
    let mut o = String::from("{\n  \"meta\": {");
    let m: Vec<String> =
        meta.iter().map(|(k, v)| format!("{}: {}", json_str(k), json_str(v))).collect();
    o.push_str(&m.join(", "));
    o.push_str("},\n  \"metrics\": [\n");
    let rows: Vec<String> = lines
        .iter()
        .map(|l| {
            let engines: Vec<String> = l
                .cells
                .iter()
                .map(|(k, c)| {
                    let v = match c {
                        Cell::Secs(s) => format!("{{\"secs\": {}}}", json_num(Some(*s))),
                        Cell::Na(w) => format!("{{\"na\": {}}}", json_str(w)),
                        Cell::Error(e) => format!("{{\"error\": {}}}", json_str(e)),
                    };
                    format!("{}: {v}", json_str(k.name()))
                })
                .collect();
            let verdict = match l.verdict() {
                Some(Verdict::Win) => "\"win\"",
                Some(Verdict::Tie) => "\"tie\"",
                Some(Verdict::Loss) => "\"loss\"",
                None => "null",
            };
            format!(
                "    {{\"id\": {}, \"name\": {}, \"group\": {}, \"mode\": {}, \"ranked\": {}, \
                 \"engines\": {{{}}}, \"ratio\": {}, \"verdict\": {}, \"mismatch\": {}}}",
                json_str(&l.id),
                json_str(&l.name),
                json_str(l.group.name()),
                json_str(l.mode),
                l.ranked,
                engines.join(", "),
                json_num(l.ratio()),
                if l.ranked { verdict } else { "null" },
                l.mismatch.as_deref().map(json_str).unwrap_or_else(|| "null".into())
            )
        })
        .collect();
    o.push_str(&rows.join(",\n"));
    let sc = score(lines);
    let groups: Vec<String> = sc
        .groups
        .iter()
        .map(|(g, gm, n)| {
            format!(
                "{}: {{\"geomean\": {}, \"metrics\": {n}}}",
                json_str(g.name()),
                json_num(Some(*gm))
            )
        })
        .collect();
    let _ = write!(
        o,
        "\n  ],\n  \"scoreboard\": {{\"wins\": {}, \"ties\": {}, \"losses\": {}, \"unranked\": {}, \"groups\": {{{}}}}}",
        sc.wins,
        sc.ties,
        sc.losses,
        sc.unranked,
        groups.join(", ")
    );
    for (k, v) in extra {
        let _ = write!(o, ",\n  {}: {v}", json_str(k));
    }
    o.push_str("\n}\n");
    o
}
