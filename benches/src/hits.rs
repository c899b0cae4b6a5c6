//! A generator of a `hits`-shaped table for `basalt-bench --suite clickbench`: ClickBench's
//! 105 columns with their types, filled with skewed, seeded values (`benches/README.md`,
//! *ClickBench*, describes the distributions). Nothing here reads the real ClickBench data;
//! the values only need the shapes the 43 queries depend on: a few heavy counters (counter
//! 62 among them), Zipf-like users, URLs, titles, referers and search phrases with a long
//! tail, mostly-empty text columns, and the literals the queries name (one user id, one URL
//! hash, one referer hash, URLs with `google` in them, titles with `Google`).
//!
//! Batch `b` depends only on the seed, `b` and the total row count, so batches can be made
//! on several threads and still give the same table.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Array, Int16Array, Int32Array, Int64Array, RecordBatch, StringBuilder,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::Rng;

/// A column's type, as ClickBench declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    /// SMALLINT.
    I16,
    /// INTEGER.
    I32,
    /// BIGINT.
    I64,
    /// TEXT.
    Text,
    /// DATE.
    Date,
    /// TIMESTAMP (seconds, stored as microseconds).
    Ts,
}

/// The 105 columns in ClickBench's order.
const COLUMNS: [(&str, Ty); 105] = {
    use Ty::*;
    [
        ("WatchID", I64),
        ("JavaEnable", I16),
        ("Title", Text),
        ("GoodEvent", I16),
        ("EventTime", Ts),
        ("EventDate", Date),
        ("CounterID", I32),
        ("ClientIP", I32),
        ("RegionID", I32),
        ("UserID", I64),
        ("CounterClass", I16),
        ("OS", I16),
        ("UserAgent", I16),
        ("URL", Text),
        ("Referer", Text),
        ("IsRefresh", I16),
        ("RefererCategoryID", I16),
        ("RefererRegionID", I32),
        ("URLCategoryID", I16),
        ("URLRegionID", I32),
        ("ResolutionWidth", I16),
        ("ResolutionHeight", I16),
        ("ResolutionDepth", I16),
        ("FlashMajor", I16),
        ("FlashMinor", I16),
        ("FlashMinor2", Text),
        ("NetMajor", I16),
        ("NetMinor", I16),
        ("UserAgentMajor", I16),
        ("UserAgentMinor", Text),
        ("CookieEnable", I16),
        ("JavascriptEnable", I16),
        ("IsMobile", I16),
        ("MobilePhone", I16),
        ("MobilePhoneModel", Text),
        ("Params", Text),
        ("IPNetworkID", I32),
        ("TraficSourceID", I16),
        ("SearchEngineID", I16),
        ("SearchPhrase", Text),
        ("AdvEngineID", I16),
        ("IsArtifical", I16),
        ("WindowClientWidth", I16),
        ("WindowClientHeight", I16),
        ("ClientTimeZone", I16),
        ("ClientEventTime", Ts),
        ("SilverlightVersion1", I16),
        ("SilverlightVersion2", I16),
        ("SilverlightVersion3", I32),
        ("SilverlightVersion4", I16),
        ("PageCharset", Text),
        ("CodeVersion", I32),
        ("IsLink", I16),
        ("IsDownload", I16),
        ("IsNotBounce", I16),
        ("FUniqID", I64),
        ("OriginalURL", Text),
        ("HID", I32),
        ("IsOldCounter", I16),
        ("IsEvent", I16),
        ("IsParameter", I16),
        ("DontCountHits", I16),
        ("WithHash", I16),
        ("HitColor", Text),
        ("LocalEventTime", Ts),
        ("Age", I16),
        ("Sex", I16),
        ("Income", I16),
        ("Interests", I16),
        ("Robotness", I16),
        ("RemoteIP", I32),
        ("WindowName", I32),
        ("OpenerName", I32),
        ("HistoryLength", I16),
        ("BrowserLanguage", Text),
        ("BrowserCountry", Text),
        ("SocialNetwork", Text),
        ("SocialAction", Text),
        ("HTTPError", I16),
        ("SendTiming", I32),
        ("DNSTiming", I32),
        ("ConnectTiming", I32),
        ("ResponseStartTiming", I32),
        ("ResponseEndTiming", I32),
        ("FetchTiming", I32),
        ("SocialSourceNetworkID", I16),
        ("SocialSourcePage", Text),
        ("ParamPrice", I64),
        ("ParamOrderID", Text),
        ("ParamCurrency", Text),
        ("ParamCurrencyID", I16),
        ("OpenstatServiceName", Text),
        ("OpenstatCampaignID", Text),
        ("OpenstatAdID", Text),
        ("OpenstatSourceID", Text),
        ("UTMSource", Text),
        ("UTMMedium", Text),
        ("UTMCampaign", Text),
        ("UTMContent", Text),
        ("UTMTerm", Text),
        ("FromTag", Text),
        ("HasGCLID", I16),
        ("RefererHash", I64),
        ("URLHash", I64),
        ("CLID", I32),
    ]
};

/// The user id the point query looks up (a user of middling activity).
pub const KNOWN_USER: i64 = 435_090_932_899_640_449;
/// The `RefererHash` one query filters on (the most frequent referer's).
pub const KNOWN_REFERER_HASH: i64 = 3_594_120_000_172_545_465;
/// The `URLHash` one query filters on (the most frequent URL's).
pub const KNOWN_URL_HASH: i64 = 2_868_770_270_353_813_622;
/// The counter the dashboard queries filter on; it gets a large share of the hits.
pub const HEAVY_COUNTER: i32 = 62;

/// Rows per batch (and per Parquet row group).
pub const BATCH: usize = 65_536;

/// 2013-07-01 00:00:00 UTC in seconds; the hits span July 2013.
const JULY_2013: i64 = 1_372_636_800;
const DAYS: i64 = 31;

/// The table's schema (no NULLs anywhere, as in ClickBench).
pub fn schema() -> SchemaRef {
    let fields: Vec<Field> = COLUMNS
        .iter()
        .map(|(name, ty)| {
            let t = match ty {
                Ty::I16 => DataType::Int16,
                Ty::I32 => DataType::Int32,
                Ty::I64 => DataType::Int64,
                Ty::Text => DataType::Utf8,
                Ty::Date => DataType::Date32,
                Ty::Ts => DataType::Timestamp(TimeUnit::Microsecond, None),
            };
            Field::new(*name, t, false)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// SplitMix64's finaliser: a well-mixed 64-bit value of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in `[0, 1)`.
fn unit(r: &mut Rng) -> f64 {
    (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A skewed index in `0..n`: `n · u^power`, so small indexes are the frequent ones (power 1
/// is uniform; larger powers give heavier heads and long tails).
fn skewed(r: &mut Rng, n: u64, power: f64) -> u64 {
    ((n as f64 * unit(r).powf(power)) as u64).min(n.saturating_sub(1))
}

/// Whether an event with probability `p` happens.
fn chance(r: &mut Rng, p: f64) -> bool {
    unit(r) < p
}

/// One of `items` by weight.
fn weighted<T: Copy>(r: &mut Rng, items: &[(T, u32)]) -> T {
    let total: u32 = items.iter().map(|(_, w)| w).sum();
    let mut x = (r.next_u64() % u64::from(total.max(1))) as u32;
    for (v, w) in items {
        if x < *w {
            return *v;
        }
        x -= w;
    }
    items[items.len() - 1].0
}

const SYLLABLES: [&str; 32] = [
    "ka", "ro", "mi", "te", "lu", "sa", "no", "vi", "de", "pa", "ri", "go", "ne", "ti", "ma", "lo",
    "be", "ku", "sha", "zen", "por", "tal", "mon", "dar", "kin", "vel", "ost", "rum", "fel", "nik",
    "bra", "qua",
];

/// Word `i` of an open vocabulary (two or three syllables).
fn word(out: &mut String, i: u64) {
    out.push_str(SYLLABLES[(i % 32) as usize]);
    out.push_str(SYLLABLES[((i / 32) % 32) as usize]);
    if i >= 1024 {
        out.push_str(SYLLABLES[((i / 1024) % 32) as usize]);
    }
}

/// `n` words of phrase `key` (frequent words more often), space-separated.
fn words(out: &mut String, key: u64, n: u64) {
    for k in 0..n {
        if k > 0 {
            out.push(' ');
        }
        let h = mix(key.wrapping_mul(31).wrapping_add(k));
        // Square of a uniform: low word numbers are common.
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        word(out, (u * u * 20_000.0) as u64);
    }
}

const GOOGLE_HOSTS: [&str; 5] = [
    "www.google.com",
    "google.ru",
    "maps.google.com",
    "images.google.ru",
    "googleads.doubleclick.net",
];
const TLDS: [&str; 6] = ["ru", "com", "net", "org", "ua", "by"];

/// The host of site `i`: one in 40 is a Google host.
fn host(out: &mut String, i: u64) {
    let h = mix(i ^ 0x5157);
    if h.is_multiple_of(40) {
        out.push_str(GOOGLE_HOSTS[((h / 40) % 5) as usize]);
        return;
    }
    if h.is_multiple_of(3) {
        out.push_str("www.");
    }
    word(out, i % 5_000);
    out.push('.');
    out.push_str(TLDS[((h / 7) % 6) as usize]);
}

/// URL number `i`: `http[s]://host/path…`; hosts repeat across URLs (about 50 URLs a host
/// on average, skewed).
fn url(out: &mut String, i: u64) {
    let h = mix(i);
    out.push_str(if h.is_multiple_of(4) { "https://" } else { "http://" });
    host(out, ((i as f64).sqrt() * 7.0) as u64 + (h % 3));
    out.push('/');
    match h % 5 {
        0 => {
            word(out, (h >> 8) % 3_000);
            let _ = write!(out, "/{}.html", i);
        }
        1 => {
            let _ = write!(out, "catalog/{}/item?id={}&ref=", (h >> 8) % 500, i);
            word(out, (h >> 20) % 200);
        }
        2 => {
            let _ = write!(out, "news/2013/07/{}", i);
        }
        3 => {
            let _ = write!(out, "search?q=");
            word(out, (h >> 8) % 3_000);
            let _ = write!(out, "&p={}", i);
        }
        _ => {
            word(out, (h >> 8) % 3_000);
            out.push('/');
            word(out, (h >> 24) % 3_000);
            let _ = write!(out, "/{i}");
        }
    }
}

/// The title of the page at URL number `i`: a few words; one in 50 mentions Google.
fn title(out: &mut String, i: u64) {
    let h = mix(i ^ 0x7171);
    if h.is_multiple_of(50) {
        out.push_str("Google ");
    }
    words(out, i, 2 + h % 5);
    if h.is_multiple_of(7) {
        out.push_str(" — news");
    }
    let _ = write!(out, " {}", i % 9_973);
}

/// A hash of URL or referer number `i` (`salt` tells the two apart); the most frequent
/// one (`i` = 0) hashes to `known`.
fn hash_of(i: u64, salt: u64, known: i64) -> i64 {
    if i == 0 { known } else { (mix(i ^ salt) >> 1) as i64 }
}

const RESOLUTIONS: [((i16, i16), u32); 10] = [
    ((1920, 1080), 22),
    ((1366, 768), 25),
    ((1280, 1024), 12),
    ((1600, 900), 8),
    ((1440, 900), 7),
    ((1024, 768), 9),
    ((1280, 800), 6),
    ((360, 640), 5),
    ((768, 1024), 4),
    ((0, 0), 2),
];
const PHONES: [&str; 12] = [
    "iPad",
    "iPhone",
    "GT-I9300",
    "GT-I9100",
    "GT-N7100",
    "Lumia 920",
    "HTC One",
    "Nexus 4",
    "Xperia Z",
    "GT-S5830",
    "Galaxy Tab",
    "Kindle Fire",
];
const LANGUAGES: [(&str, u32); 8] =
    [("ru", 60), ("en", 15), ("uk", 8), ("de", 4), ("tr", 4), ("be", 3), ("kk", 3), ("", 3)];
const COUNTRIES: [(&str, u32); 10] = [
    ("Ru", 55),
    ("Ua", 12),
    ("By", 6),
    ("Kz", 6),
    ("Us", 5),
    ("De", 4),
    ("Tr", 4),
    ("Fr", 2),
    ("Gb", 2),
    ("", 4),
];

/// The latent values of one hit that several columns derive from.
struct Hit {
    user: u64,
    counter: i32,
    time: i64,
    url: Option<u64>,
    referer: Option<u64>,
    phrase: Option<u64>,
    region: i32,
    mobile: bool,
    phone: u64,
    resolution: (i16, i16),
    adv: i16,
    search_engine: i16,
    ip: u64,
}

/// Sizes of the value pools for a table of `rows` rows.
struct Pools {
    users: u64,
    urls: u64,
    referers: u64,
    phrases: u64,
    ips: u64,
    /// The user given [`KNOWN_USER`] as id: one of middling activity.
    known_user: u64,
}

impl Pools {
    fn new(rows: usize) -> Pools {
        let r = rows.max(1_000) as u64;
        let users = r / 8;
        Pools {
            users,
            urls: r / 4,
            referers: r / 6,
            phrases: r / 30,
            ips: r / 3,
            known_user: (users / 2).min(5_000),
        }
    }
}

/// Hours of the day, weighted like a day of web traffic.
const HOURS: [(i64, u32); 24] = [
    (0, 3),
    (1, 2),
    (2, 1),
    (3, 1),
    (4, 1),
    (5, 2),
    (6, 3),
    (7, 5),
    (8, 7),
    (9, 8),
    (10, 9),
    (11, 9),
    (12, 9),
    (13, 9),
    (14, 9),
    (15, 8),
    (16, 8),
    (17, 8),
    (18, 8),
    (19, 9),
    (20, 9),
    (21, 8),
    (22, 6),
    (23, 4),
];

fn hit(r: &mut Rng, p: &Pools) -> Hit {
    let counter = if chance(r, 0.06) { HEAVY_COUNTER } else { 1 + skewed(r, 20_000, 3.0) as i32 };
    let day = r.range(0, DAYS - 1);
    let hour = weighted(r, &HOURS);
    let time = JULY_2013 + day * 86_400 + hour * 3_600 + r.range(0, 3_599);
    let url = (!chance(r, 0.01)).then(|| skewed(r, p.urls, 2.5));
    let referer = (!chance(r, 0.35)).then(|| skewed(r, p.referers, 3.0));
    let phrase = chance(r, 0.14).then(|| skewed(r, p.phrases, 2.5));
    let mobile = chance(r, 0.15);
    let phone = if mobile { skewed(r, 60, 2.0) } else { 0 };
    let resolution = if mobile { (360, 640) } else { weighted(r, &RESOLUTIONS) };
    let adv = if chance(r, 0.04) { 1 + skewed(r, 30, 2.0) as i16 } else { 0 };
    let search_engine = if phrase.is_some() { 1 + skewed(r, 12, 2.5) as i16 } else { 0 };
    Hit {
        user: skewed(r, p.users, 2.5),
        counter,
        time,
        url,
        referer,
        phrase,
        region: 1 + skewed(r, 10_000, 4.0) as i32,
        mobile,
        phone,
        resolution,
        adv,
        search_engine,
        ip: skewed(r, p.ips, 1.5),
    }
}

/// Column builder over the hits of one batch.
struct Cols<'a> {
    hits: &'a [Hit],
    rng: Rng,
    buf: String,
}

impl Cols<'_> {
    fn i16(&mut self, f: impl Fn(&Hit, &mut Rng) -> i16) -> ArrayRef {
        let r = &mut self.rng;
        Arc::new(Int16Array::from_iter_values(self.hits.iter().map(|h| f(h, r))))
    }
    fn i32(&mut self, f: impl Fn(&Hit, &mut Rng) -> i32) -> ArrayRef {
        let r = &mut self.rng;
        Arc::new(Int32Array::from_iter_values(self.hits.iter().map(|h| f(h, r))))
    }
    fn i64(&mut self, f: impl Fn(&Hit, &mut Rng) -> i64) -> ArrayRef {
        let r = &mut self.rng;
        Arc::new(Int64Array::from_iter_values(self.hits.iter().map(|h| f(h, r))))
    }
    fn ts(&mut self, f: impl Fn(&Hit, &mut Rng) -> i64) -> ArrayRef {
        let r = &mut self.rng;
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            self.hits.iter().map(|h| f(h, r) * 1_000_000),
        ))
    }
    /// A text column: `f` writes the value (nothing for the empty string).
    fn text(&mut self, f: impl Fn(&Hit, &mut Rng, &mut String)) -> ArrayRef {
        let mut b = StringBuilder::with_capacity(self.hits.len(), self.hits.len() * 8);
        for h in self.hits {
            self.buf.clear();
            f(h, &mut self.rng, &mut self.buf);
            b.append_value(&self.buf);
        }
        Arc::new(b.finish())
    }
    /// A mostly-empty text column: a value from `pick` with probability `p`.
    fn sparse(&mut self, p: f64, pick: &'static [&'static str]) -> ArrayRef {
        self.text(move |_, r, out| {
            if chance(r, p) {
                out.push_str(pick[(r.next_u64() % pick.len() as u64) as usize]);
            }
        })
    }
}

/// Batch number `batch` of a table of `rows` rows (the last batch may be short); the same
/// arguments always give the same batch.
pub fn batch(rows: usize, seed: u64, batch: usize) -> RecordBatch {
    let start = batch * BATCH;
    let n = rows.saturating_sub(start).min(BATCH);
    let pools = Pools::new(rows);
    let mut r = Rng::new(mix(seed ^ mix(batch as u64)));
    let hits: Vec<Hit> = (0..n).map(|_| hit(&mut r, &pools)).collect();
    let mut c =
        Cols { hits: &hits, rng: Rng::new(mix(seed ^ mix(!(batch as u64)))), buf: String::new() };
    let wid = start as u64;
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(COLUMNS.len());
    let mut next = 0u64;
    for (name, _) in COLUMNS {
        let a: ArrayRef = match name {
            "WatchID" => {
                let ids: Vec<i64> = (0..n as u64)
                    .map(|i| (mix(seed.wrapping_add(wid + i) ^ 0xA5A5) >> 1) as i64)
                    .collect();
                Arc::new(Int64Array::from(ids))
            }
            "JavaEnable" => c.i16(|_, r| chance(r, 0.7) as i16),
            "Title" => c.text(|h, r, out| {
                if let Some(u) = h.url
                    && !chance(r, 0.05)
                {
                    title(out, u)
                }
            }),
            "GoodEvent" => c.i16(|_, _| 1),
            "EventTime" => c.ts(|h, _| h.time),
            "EventDate" => Arc::new(Date32Array::from_iter_values(
                hits.iter().map(|h| (h.time.div_euclid(86_400)) as i32),
            )),
            "CounterID" => c.i32(|h, _| h.counter),
            "ClientIP" => c.i32(|h, _| (mix(h.ip ^ 0x1919) >> 32) as u32 as i32),
            "RegionID" => c.i32(|h, _| h.region),
            "UserID" => {
                let known = pools.known_user;
                c.i64(
                    move |h, _| {
                        if h.user == known {
                            KNOWN_USER
                        } else {
                            (mix(h.user ^ 0x7777) >> 1) as i64
                        }
                    },
                )
            }
            "CounterClass" => c.i16(|_, r| weighted(r, &[(0, 80), (1, 15), (2, 5)])),
            "OS" => c.i16(|h, r| {
                if h.mobile {
                    weighted(r, &[(44, 50), (50, 40), (62, 10)])
                } else {
                    skewed(r, 80, 2.0) as i16
                }
            }),
            "UserAgent" => c.i16(|_, r| skewed(r, 40, 2.0) as i16),
            "URL" => c.text(|h, _, out| {
                if let Some(u) = h.url {
                    url(out, u)
                }
            }),
            "Referer" => c.text(|h, _, out| {
                if let Some(u) = h.referer {
                    url(out, u.wrapping_mul(7).wrapping_add(3))
                }
            }),
            "IsRefresh" => c.i16(|_, r| chance(r, 0.08) as i16),
            "RefererCategoryID" => c.i16(|h, r| {
                if h.referer.is_some() && chance(r, 0.3) {
                    1 + skewed(r, 40, 2.0) as i16
                } else {
                    0
                }
            }),
            "RefererRegionID" => c.i32(|h, r| {
                if h.referer.is_some() && chance(r, 0.4) {
                    1 + skewed(r, 5_000, 3.0) as i32
                } else {
                    0
                }
            }),
            "URLCategoryID" => {
                c.i16(|_, r| if chance(r, 0.3) { 1 + skewed(r, 40, 2.0) as i16 } else { 0 })
            }
            "URLRegionID" => {
                c.i32(|_, r| if chance(r, 0.4) { 1 + skewed(r, 5_000, 3.0) as i32 } else { 0 })
            }
            "ResolutionWidth" => c.i16(|h, _| h.resolution.0),
            "ResolutionHeight" => c.i16(|h, _| h.resolution.1),
            "ResolutionDepth" => {
                c.i16(
                    |h, r| if h.resolution.0 == 0 { 0 } else { weighted(r, &[(24, 60), (32, 40)]) },
                )
            }
            "FlashMajor" => {
                c.i16(
                    |h, r| {
                        if h.mobile || chance(r, 0.3) { 0 } else { 9 + skewed(r, 3, 1.5) as i16 }
                    },
                )
            }
            "FlashMinor" => c.i16(|_, r| skewed(r, 10, 2.0) as i16),
            "FlashMinor2" => c.sparse(0.4, &["0", "1", "2", "115", "152", "202"]),
            "NetMajor" => c.i16(|_, r| skewed(r, 5, 2.0) as i16),
            "NetMinor" => c.i16(|_, r| skewed(r, 8, 2.0) as i16),
            "UserAgentMajor" => c.i16(|_, r| skewed(r, 30, 1.5) as i16),
            "UserAgentMinor" => c.sparse(0.7, &["0", "1", "2", "5", "8", "a1", "0b"]),
            "CookieEnable" => c.i16(|_, r| (!chance(r, 0.02)) as i16),
            "JavascriptEnable" => c.i16(|_, r| (!chance(r, 0.03)) as i16),
            "IsMobile" => c.i16(|h, _| h.mobile as i16),
            "MobilePhone" => c.i16(|h, _| if h.mobile { 1 + (h.phone % 40) as i16 } else { 0 }),
            "MobilePhoneModel" => c.text(|h, _, out| {
                if h.mobile && h.phone % 7 != 6 {
                    out.push_str(PHONES[(h.phone % PHONES.len() as u64) as usize]);
                    if h.phone >= PHONES.len() as u64 {
                        let _ = write!(out, " {}", h.phone / PHONES.len() as u64);
                    }
                }
            }),
            "Params" => c.sparse(0.05, &["a=1", "utm=ad", "from=mail&id=7", "ref=promo"]),
            "IPNetworkID" => c.i32(|h, _| (h.ip / 97) as i32 + 1),
            "TraficSourceID" => c.i16(|h, r| {
                if h.phrase.is_some() {
                    2
                } else {
                    weighted(
                        r,
                        &[
                            (-1, 3),
                            (0, 40),
                            (1, 15),
                            (3, 6),
                            (4, 4),
                            (5, 3),
                            (6, 16),
                            (7, 3),
                            (8, 2),
                            (9, 2),
                            (10, 1),
                        ],
                    )
                }
            }),
            "SearchEngineID" => c.i16(|h, _| h.search_engine),
            "SearchPhrase" => c.text(|h, _, out| {
                if let Some(p) = h.phrase {
                    words(out, p ^ 0xFACE, 1 + mix(p) % 4);
                    if p % 5 == 0 {
                        let _ = write!(out, " {}", p % 2013);
                    }
                }
            }),
            "AdvEngineID" => c.i16(|h, _| h.adv),
            "IsArtifical" => c.i16(|_, r| chance(r, 0.01) as i16),
            "WindowClientWidth" => c.i16(|h, r| (h.resolution.0 - r.range(0, 60) as i16).max(0)),
            "WindowClientHeight" => c.i16(|h, r| (h.resolution.1 - r.range(90, 250) as i16).max(0)),
            "ClientTimeZone" => {
                c.i16(|_, r| weighted(r, &[(-1, 5), (4, 60), (3, 15), (2, 10), (6, 5), (0, 5)]))
            }
            "ClientEventTime" => c.ts(|h, r| h.time + r.range(-30, 30)),
            "SilverlightVersion1" => c.i16(|_, r| if chance(r, 0.6) { 0 } else { 5 }),
            "SilverlightVersion2" => c.i16(|_, r| skewed(r, 2, 1.0) as i16),
            "SilverlightVersion3" => {
                c.i32(|_, r| if chance(r, 0.6) { 0 } else { 61_118 + r.range(0, 3) as i32 })
            }
            "SilverlightVersion4" => c.i16(|_, r| skewed(r, 3, 1.0) as i16),
            "PageCharset" => c.text(|_, r, out| {
                out.push_str(weighted(r, &[("utf-8", 60), ("windows-1251", 35), ("", 5)]))
            }),
            "CodeVersion" => c.i32(|_, r| 100 + skewed(r, 500, 2.0) as i32),
            "IsLink" => c.i16(|_, r| chance(r, 0.04) as i16),
            "IsDownload" => c.i16(|_, r| chance(r, 0.01) as i16),
            "IsNotBounce" => c.i16(|_, r| chance(r, 0.3) as i16),
            "FUniqID" => {
                c.i64(|h, r| if chance(r, 0.4) { 0 } else { (mix(h.user ^ 0xF00) >> 2) as i64 })
            }
            "OriginalURL" => c.text(|h, r, out| {
                if let Some(u) = h.url.filter(|_| chance(r, 0.05)) {
                    url(out, u);
                    out.push_str("#orig");
                }
            }),
            "HID" => c.i32(|_, r| (r.next_u64() >> 33) as i32),
            "IsOldCounter" => c.i16(|_, _| 1),
            "IsEvent" => c.i16(|_, r| chance(r, 0.02) as i16),
            "IsParameter" => c.i16(|_, r| chance(r, 0.01) as i16),
            "DontCountHits" => c.i16(|_, r| chance(r, 0.03) as i16),
            "WithHash" => c.i16(|_, r| chance(r, 0.02) as i16),
            "HitColor" => c.text(|_, r, out| {
                out.push_str(weighted(r, &[("5", 60), ("3", 20), ("F", 15), ("E", 5)]))
            }),
            "LocalEventTime" => c.ts(|h, r| h.time + 3_600 * r.range(-2, 4)),
            "Age" => {
                c.i16(|_, r| weighted(r, &[(0, 40), (1, 8), (2, 15), (3, 15), (4, 12), (5, 10)]))
            }
            "Sex" => c.i16(|_, r| weighted(r, &[(0, 40), (1, 35), (2, 25)])),
            "Income" => c.i16(|_, r| weighted(r, &[(0, 45), (1, 25), (2, 20), (3, 7), (4, 3)])),
            "Interests" => {
                c.i16(|_, r| if chance(r, 0.5) { 0 } else { skewed(r, 1_000, 2.0) as i16 })
            }
            "Robotness" => {
                c.i16(|_, r| if chance(r, 0.97) { 0 } else { 1 + skewed(r, 20, 1.0) as i16 })
            }
            "RemoteIP" => c.i32(|h, _| (mix(h.ip ^ 0x4242) >> 32) as u32 as i32),
            "WindowName" => {
                c.i32(|_, r| if chance(r, 0.5) { -1 } else { (r.next_u64() >> 33) as i32 })
            }
            "OpenerName" => {
                c.i32(|_, r| if chance(r, 0.8) { -1 } else { (r.next_u64() >> 33) as i32 })
            }
            "HistoryLength" => c.i16(|_, r| skewed(r, 20, 2.0) as i16),
            "BrowserLanguage" => c.text(|_, r, out| out.push_str(weighted(r, &LANGUAGES))),
            "BrowserCountry" => c.text(|_, r, out| out.push_str(weighted(r, &COUNTRIES))),
            "SocialNetwork" => {
                c.sparse(0.02, &["vkontakte", "facebook", "twitter", "odnoklassniki"])
            }
            "SocialAction" => c.sparse(0.01, &["like", "share", "comment"]),
            "HTTPError" => c.i16(|_, r| {
                if chance(r, 0.99) { 0 } else { weighted(r, &[(404, 80), (500, 15), (403, 5)]) }
            }),
            "SendTiming"
            | "DNSTiming"
            | "ConnectTiming"
            | "ResponseStartTiming"
            | "ResponseEndTiming"
            | "FetchTiming" => {
                next += 1;
                let scale = 50 * next as i64;
                c.i32(move |_, r| {
                    if chance(r, 0.5) {
                        0
                    } else {
                        (skewed(r, 20 * scale as u64, 2.0) as i64) as i32
                    }
                })
            }
            "SocialSourceNetworkID" => {
                c.i16(|_, r| if chance(r, 0.97) { 0 } else { 1 + skewed(r, 10, 1.5) as i16 })
            }
            "SocialSourcePage" => c.sparse(0.03, &["/feed", "/groups/news", "/wall-1234", "/im"]),
            "ParamPrice" => {
                c.i64(
                    |_, r| {
                        if chance(r, 0.98) { 0 } else { 100 * (1 + skewed(r, 5_000, 2.0) as i64) }
                    },
                )
            }
            "ParamOrderID" => c.text(|_, r, out| {
                if chance(r, 0.01) {
                    let _ = write!(out, "order-{}", r.next_u64() % 1_000_000);
                }
            }),
            "ParamCurrency" => c.text(|_, r, out| {
                if chance(r, 0.05) {
                    out.push_str(weighted(r, &[("RUB", 80), ("USD", 12), ("EUR", 6), ("UAH", 2)]))
                }
            }),
            "ParamCurrencyID" => {
                c.i16(|_, r| if chance(r, 0.95) { 0 } else { 1 + skewed(r, 4, 1.0) as i16 })
            }
            "OpenstatServiceName" => {
                c.sparse(0.02, &["direct.yandex.ru", "begun.ru", "market.yandex.ru"])
            }
            "OpenstatCampaignID" => c.sparse(0.02, &["1", "17", "2013", "summer"]),
            "OpenstatAdID" => c.sparse(0.02, &["ad1", "ad2", "ad42"]),
            "OpenstatSourceID" => c.sparse(0.02, &["src", "partner", "main"]),
            "UTMSource" => c.sparse(0.06, &["yandex", "google", "vk", "email", "direct"]),
            "UTMMedium" => c.sparse(0.05, &["cpc", "email", "banner", "social"]),
            "UTMCampaign" => c.sparse(0.05, &["summer2013", "brand", "retargeting", "sale"]),
            "UTMContent" => c.sparse(0.03, &["text", "image", "video"]),
            "UTMTerm" => c.sparse(0.03, &["buy", "cheap", "review", "news"]),
            "FromTag" => c.sparse(0.02, &["mail", "widget", "rss", "partner"]),
            "HasGCLID" => c.i16(|_, r| chance(r, 0.01) as i16),
            "RefererHash" => c.i64(|h, _| match h.referer {
                Some(u) => hash_of(u, 0xBEEF, KNOWN_REFERER_HASH),
                None => 0,
            }),
            "URLHash" => c.i64(|h, _| match h.url {
                Some(u) => hash_of(u, 0xCAFE, KNOWN_URL_HASH),
                None => 0,
            }),
            // CLID
            _ => c.i32(|_, r| if chance(r, 0.9) { 0 } else { 1 + skewed(r, 100, 1.5) as i32 }),
        };
        cols.push(a);
    }
    RecordBatch::try_new(schema(), cols).expect("columns follow the schema")
}

/// The number of batches of a table of `rows` rows.
pub fn batches(rows: usize) -> usize {
    rows.div_ceil(BATCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Int16Type, Int32Type, Int64Type};

    fn col<'a>(b: &'a RecordBatch, name: &str) -> &'a ArrayRef {
        b.column(b.schema().index_of(name).unwrap())
    }

    #[test]
    fn hits_have_clickbench_columns_and_the_queries_literals() {
        let rows = 100_000;
        let all: Vec<RecordBatch> = (0..batches(rows)).map(|b| batch(rows, 7, b)).collect();
        assert_eq!(all.iter().map(|b| b.num_rows()).sum::<usize>(), rows);
        assert_eq!(schema().fields().len(), 105);
        assert!(all.iter().all(|b| b.columns().iter().all(|c| c.null_count() == 0)));
        // Same arguments, same batch; another batch differs.
        assert_eq!(batch(rows, 7, 1), all[1]);
        assert_ne!(batch(rows, 7, 0).column(0), all[1].column(0));

        let count = |f: &dyn Fn(&RecordBatch, usize) -> bool| -> usize {
            all.iter().map(|b| (0..b.num_rows()).filter(|&i| f(b, i)).count()).sum()
        };
        let counter = |b: &RecordBatch, i| {
            col(b, "CounterID").as_primitive::<Int32Type>().value(i) == HEAVY_COUNTER
        };
        let heavy = count(&counter);
        assert!((4_000..9_000).contains(&heavy), "{heavy} hits of counter 62");
        let user = |b: &RecordBatch, i| {
            col(b, "UserID").as_primitive::<Int64Type>().value(i) == KNOWN_USER
        };
        assert!(count(&user) > 0);
        let text = |name: &'static str, needle: &'static str| {
            move |b: &RecordBatch, i: usize| {
                col(b, name).as_string::<i32>().value(i).contains(needle)
            }
        };
        let google = count(&text("URL", "google"));
        assert!((500..10_000).contains(&google), "{google} URLs with google");
        assert!(count(&text("Title", "Google")) > 500);
        let phrases = count(&|b, i| !col(b, "SearchPhrase").as_string::<i32>().value(i).is_empty());
        assert!((10_000..20_000).contains(&phrases), "{phrases} search phrases");
        let hash = |name: &'static str, v: i64| {
            move |b: &RecordBatch, i: usize| col(b, name).as_primitive::<Int64Type>().value(i) == v
        };
        assert!(count(&hash("URLHash", KNOWN_URL_HASH)) > 0);
        assert!(count(&hash("RefererHash", KNOWN_REFERER_HASH)) > 0);
        // A URL always has the same hash, and its page the same title.
        let mut seen = std::collections::HashMap::new();
        for b in &all {
            let (u, h, t) = (col(b, "URL").as_string::<i32>(), col(b, "URLHash"), col(b, "Title"));
            let (h, t) = (h.as_primitive::<Int64Type>(), t.as_string::<i32>());
            for i in 0..b.num_rows() {
                let prev = seen.entry(u.value(i).to_string()).or_insert(h.value(i));
                assert_eq!(*prev, h.value(i));
                assert!(t.value(i).is_empty() || !u.value(i).is_empty());
            }
        }
        let refresh = count(&|b, i| col(b, "IsRefresh").as_primitive::<Int16Type>().value(i) == 1);
        assert!((6_000..10_000).contains(&refresh));
        let dates = col(&all[0], "EventDate").as_primitive::<arrow::datatypes::Date32Type>();
        assert!(dates.values().iter().all(|d| (15_887..15_887 + 31).contains(d)));
    }
}
