//! The 43 ClickBench queries of `basalt-bench --suite clickbench`, as ClickBench runs them on
//! DataFusion (quoted identifiers, which DuckDB and SQLite accept too), each with the part
//! of its result the engines must agree on; [`for_sqlite`] rewrites what SQLite spells
//! differently. The table they read is [`crate::hits`].

use crate::check::Check;

/// Query `n` (0–42).
pub fn query(n: usize) -> String {
    let q = QUERIES[n].0;
    if !q.contains("{sums}") {
        return q.to_string();
    }
    let sums: Vec<String> = std::iter::once("SUM(\"ResolutionWidth\")".to_string())
        .chain((1..90).map(|i| format!("SUM(\"ResolutionWidth\" + {i})")))
        .collect();
    q.replace("{sums}", &sums.join(", "))
}

/// What the engines' results of query `n` must agree on: an `ORDER BY … LIMIT` whose sort
/// keys can tie compares only the sort keys (ties may pick different rows), a `LIMIT`
/// without `ORDER BY` only the row count.
pub fn check(n: usize) -> Check {
    QUERIES[n].1
}

/// The number of queries.
pub const COUNT: usize = 43;

/// `sql` in SQLite's dialect, or `None` when SQLite cannot run it (no `REGEXP_REPLACE`):
/// `LIKE` becomes the case-sensitive `GLOB`, `extract(minute …)` and `DATE_TRUNC('minute',
/// …)` become `strftime` over the ISO text timestamps SQLite stores.
pub fn for_sqlite(sql: &str) -> Option<String> {
    if sql.contains("REGEXP_REPLACE") {
        return None;
    }
    let mut s = sql
        .replace(
            "extract(minute FROM \"EventTime\")",
            "cast(strftime('%M', \"EventTime\") as integer)",
        )
        .replace(
            "DATE_TRUNC('minute', \"EventTime\")",
            "strftime('%Y-%m-%dT%H:%M:00', \"EventTime\")",
        );
    while let Some(at) = s.find(" LIKE '") {
        let start = at + " LIKE '".len();
        let end = start + s[start..].find('\'')?;
        let pattern = s[start..end].replace('%', "*");
        s = format!("{} GLOB '{pattern}{}", &s[..at], &s[end..]);
    }
    Some(s)
}

const QUERIES: [(&str, Check); COUNT] = [
    (r#"SELECT COUNT(*) FROM hits"#, Check::Full),
    (r#"SELECT COUNT(*) FROM hits WHERE "AdvEngineID" <> 0"#, Check::Full),
    (r#"SELECT SUM("AdvEngineID"), COUNT(*), AVG("ResolutionWidth") FROM hits"#, Check::Full),
    (r#"SELECT AVG("UserID") FROM hits"#, Check::Full),
    (r#"SELECT COUNT(DISTINCT "UserID") FROM hits"#, Check::Full),
    (r#"SELECT COUNT(DISTINCT "SearchPhrase") FROM hits"#, Check::Full),
    (r#"SELECT MIN("EventDate"), MAX("EventDate") FROM hits"#, Check::Full),
    (
        r#"SELECT "AdvEngineID", COUNT(*) FROM hits WHERE "AdvEngineID" <> 0 GROUP BY "AdvEngineID" ORDER BY COUNT(*) DESC"#,
        Check::Full,
    ),
    (
        r#"SELECT "RegionID", COUNT(DISTINCT "UserID") AS u FROM hits GROUP BY "RegionID" ORDER BY u DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "RegionID", SUM("AdvEngineID"), COUNT(*) AS c, AVG("ResolutionWidth"), COUNT(DISTINCT "UserID") FROM hits GROUP BY "RegionID" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "MobilePhoneModel", COUNT(DISTINCT "UserID") AS u FROM hits WHERE "MobilePhoneModel" <> '' GROUP BY "MobilePhoneModel" ORDER BY u DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "MobilePhone", "MobilePhoneModel", COUNT(DISTINCT "UserID") AS u FROM hits WHERE "MobilePhoneModel" <> '' GROUP BY "MobilePhone", "MobilePhoneModel" ORDER BY u DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "SearchPhrase", COUNT(*) AS c FROM hits WHERE "SearchPhrase" <> '' GROUP BY "SearchPhrase" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "SearchPhrase", COUNT(DISTINCT "UserID") AS u FROM hits WHERE "SearchPhrase" <> '' GROUP BY "SearchPhrase" ORDER BY u DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "SearchEngineID", "SearchPhrase", COUNT(*) AS c FROM hits WHERE "SearchPhrase" <> '' GROUP BY "SearchEngineID", "SearchPhrase" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "UserID", COUNT(*) FROM hits GROUP BY "UserID" ORDER BY COUNT(*) DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "UserID", "SearchPhrase", COUNT(*) FROM hits GROUP BY "UserID", "SearchPhrase" ORDER BY COUNT(*) DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "UserID", "SearchPhrase", COUNT(*) FROM hits GROUP BY "UserID", "SearchPhrase" LIMIT 10"#,
        Check::Rows,
    ),
    (
        r#"SELECT "UserID", extract(minute FROM "EventTime") AS m, "SearchPhrase", COUNT(*) FROM hits GROUP BY "UserID", m, "SearchPhrase" ORDER BY COUNT(*) DESC LIMIT 10"#,
        Check::Cols(&[3]),
    ),
    (r#"SELECT "UserID" FROM hits WHERE "UserID" = 435090932899640449"#, Check::Full),
    (r#"SELECT COUNT(*) FROM hits WHERE "URL" LIKE '%google%'"#, Check::Full),
    (
        r#"SELECT "SearchPhrase", MIN("URL"), COUNT(*) AS c FROM hits WHERE "URL" LIKE '%google%' AND "SearchPhrase" <> '' GROUP BY "SearchPhrase" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "SearchPhrase", MIN("URL"), MIN("Title"), COUNT(*) AS c, COUNT(DISTINCT "UserID") FROM hits WHERE "Title" LIKE '%Google%' AND "URL" NOT LIKE '%.google.%' AND "SearchPhrase" <> '' GROUP BY "SearchPhrase" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[3]),
    ),
    (
        r#"SELECT * FROM hits WHERE "URL" LIKE '%google%' ORDER BY "EventTime" LIMIT 10"#,
        Check::Cols(&[4]),
    ),
    (
        r#"SELECT "SearchPhrase" FROM hits WHERE "SearchPhrase" <> '' ORDER BY "EventTime" LIMIT 10"#,
        Check::Rows,
    ),
    (
        r#"SELECT "SearchPhrase" FROM hits WHERE "SearchPhrase" <> '' ORDER BY "SearchPhrase" LIMIT 10"#,
        Check::Full,
    ),
    (
        r#"SELECT "SearchPhrase" FROM hits WHERE "SearchPhrase" <> '' ORDER BY "EventTime", "SearchPhrase" LIMIT 10"#,
        Check::Full,
    ),
    (
        r#"SELECT "CounterID", AVG(length("URL")) AS l, COUNT(*) AS c FROM hits WHERE "URL" <> '' GROUP BY "CounterID" HAVING COUNT(*) > 100000 ORDER BY l DESC LIMIT 25"#,
        Check::Full,
    ),
    (
        r#"SELECT REGEXP_REPLACE("Referer", '^https?://(?:www\.)?([^/]+)/.*$', '\1') AS k, AVG(length("Referer")) AS l, COUNT(*) AS c, MIN("Referer") FROM hits WHERE "Referer" <> '' GROUP BY k HAVING COUNT(*) > 100000 ORDER BY l DESC LIMIT 25"#,
        Check::Full,
    ),
    (r#"SELECT {sums} FROM hits"#, Check::Full),
    (
        r#"SELECT "SearchEngineID", "ClientIP", COUNT(*) AS c, SUM("IsRefresh"), AVG("ResolutionWidth") FROM hits WHERE "SearchPhrase" <> '' GROUP BY "SearchEngineID", "ClientIP" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "WatchID", "ClientIP", COUNT(*) AS c, SUM("IsRefresh"), AVG("ResolutionWidth") FROM hits WHERE "SearchPhrase" <> '' GROUP BY "WatchID", "ClientIP" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "WatchID", "ClientIP", COUNT(*) AS c, SUM("IsRefresh"), AVG("ResolutionWidth") FROM hits GROUP BY "WatchID", "ClientIP" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "URL", COUNT(*) AS c FROM hits GROUP BY "URL" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT 1, "URL", COUNT(*) AS c FROM hits GROUP BY 1, "URL" ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "ClientIP", "ClientIP" - 1, "ClientIP" - 2, "ClientIP" - 3, COUNT(*) AS c FROM hits GROUP BY "ClientIP", "ClientIP" - 1, "ClientIP" - 2, "ClientIP" - 3 ORDER BY c DESC LIMIT 10"#,
        Check::Cols(&[4]),
    ),
    (
        r#"SELECT "URL", COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-01' AND "EventDate" <= '2013-07-31' AND "DontCountHits" = 0 AND "IsRefresh" = 0 AND "URL" <> '' GROUP BY "URL" ORDER BY PageViews DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "Title", COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-01' AND "EventDate" <= '2013-07-31' AND "DontCountHits" = 0 AND "IsRefresh" = 0 AND "Title" <> '' GROUP BY "Title" ORDER BY PageViews DESC LIMIT 10"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "URL", COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-01' AND "EventDate" <= '2013-07-31' AND "IsRefresh" = 0 AND "IsLink" <> 0 AND "IsDownload" = 0 GROUP BY "URL" ORDER BY PageViews DESC LIMIT 10 OFFSET 1000"#,
        Check::Cols(&[1]),
    ),
    (
        r#"SELECT "TraficSourceID", "SearchEngineID", "AdvEngineID", CASE WHEN ("SearchEngineID" = 0 AND "AdvEngineID" = 0) THEN "Referer" ELSE '' END AS Src, "URL" AS Dst, COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-01' AND "EventDate" <= '2013-07-31' AND "IsRefresh" = 0 GROUP BY "TraficSourceID", "SearchEngineID", "AdvEngineID", Src, Dst ORDER BY PageViews DESC LIMIT 10 OFFSET 1000"#,
        Check::Cols(&[5]),
    ),
    (
        r#"SELECT "URLHash", "EventDate", COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-01' AND "EventDate" <= '2013-07-31' AND "IsRefresh" = 0 AND "TraficSourceID" IN (-1, 6) AND "RefererHash" = 3594120000172545465 GROUP BY "URLHash", "EventDate" ORDER BY PageViews DESC LIMIT 10 OFFSET 100"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT "WindowClientWidth", "WindowClientHeight", COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-01' AND "EventDate" <= '2013-07-31' AND "IsRefresh" = 0 AND "DontCountHits" = 0 AND "URLHash" = 2868770270353813622 GROUP BY "WindowClientWidth", "WindowClientHeight" ORDER BY PageViews DESC LIMIT 10 OFFSET 10000"#,
        Check::Cols(&[2]),
    ),
    (
        r#"SELECT DATE_TRUNC('minute', "EventTime") AS M, COUNT(*) AS PageViews FROM hits WHERE "CounterID" = 62 AND "EventDate" >= '2013-07-14' AND "EventDate" <= '2013-07-15' AND "IsRefresh" = 0 AND "DontCountHits" = 0 GROUP BY DATE_TRUNC('minute', "EventTime") ORDER BY DATE_TRUNC('minute', "EventTime") LIMIT 10 OFFSET 1000"#,
        Check::Full,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_complete_and_sqlite_rewrites_keep_their_meaning() {
        assert!(query(29).contains("SUM(\"ResolutionWidth\" + 89) FROM hits"));
        assert_eq!(query(29).matches("SUM(").count(), 90);
        assert!((0..COUNT).all(|n| query(n).contains("FROM hits") && !query(n).ends_with(';')));
        let q = for_sqlite(&query(22)).unwrap();
        assert!(q.contains("\"Title\" GLOB '*Google*'"), "{q}");
        assert!(q.contains("\"URL\" NOT GLOB '*.google.*'"), "{q}");
        assert!(!q.contains("LIKE"));
        let q = for_sqlite(&query(42)).unwrap();
        assert!(q.contains("GROUP BY strftime('%Y-%m-%dT%H:%M:00', \"EventTime\")"), "{q}");
        assert!(for_sqlite(&query(18)).unwrap().contains("strftime('%M', \"EventTime\")"));
        assert_eq!(for_sqlite(&query(28)), None);
        assert_eq!(for_sqlite(&query(0)).as_deref(), Some("SELECT COUNT(*) FROM hits"));
    }
}
