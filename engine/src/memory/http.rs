//! An OpenAI-compatible HTTP embedder: `POST {base_url}/embeddings` with
//! `{"model": …, "input": [texts…], "encoding_format": "float"}`, answered by
//! `{"data": [{"index": i, "embedding": [...]}, …]}` — OpenAI's API and the servers that
//! copy it (Azure-style proxies, Ollama, vLLM, llama.cpp, LM Studio, …).
//!
//! Owns batching, retries and timeouts of those calls; knows nothing of stores.
//! Texts go in batches of at most [`HttpEmbedder::batch_size`]; a 429 or 5xx answer (or a
//! connection failure or timeout) is retried up to [`HttpEmbedder::max_retries`] times
//! with exponential backoff, honouring a `Retry-After` header given in seconds; any other
//! failure, and a vector of the wrong dimension, is an error naming the endpoint.

use std::time::Duration;

use serde_json::{Value as Json, json};

use super::Embedder;

/// Environment variable with the endpoint's base URL (default `https://api.openai.com/v1`).
pub const BASE_URL_ENV: &str = "BASALT_EMBED_BASE_URL";
/// Environment variable with the API key (falls back to `OPENAI_API_KEY`).
pub const API_KEY_ENV: &str = "BASALT_EMBED_API_KEY";

/// An embedder calling an OpenAI-compatible `/embeddings` endpoint (see the module docs).
pub struct HttpEmbedder {
    base_url: String,
    model: String,
    dim: usize,
    api_key: Option<String>,
    batch_size: usize,
    max_retries: u32,
    backoff: Duration,
    agent: ureq::Agent,
}

impl std::fmt::Debug for HttpEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("HttpEmbedder")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("batch_size", &self.batch_size)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

impl HttpEmbedder {
    /// An embedder for `model` (vectors of dimension `dim`) at `base_url` (e.g.
    /// `https://api.openai.com/v1`, `http://localhost:11434/v1`), without a key; batches of
    /// 128 texts, 5 retries starting at 500 ms, 30 s timeout per call.
    pub fn new(base_url: &str, model: &str, dim: usize) -> HttpEmbedder {
        HttpEmbedder {
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            dim,
            api_key: None,
            batch_size: 128,
            max_retries: 5,
            backoff: Duration::from_millis(500),
            agent: agent(Duration::from_secs(30)),
        }
    }

    /// [`HttpEmbedder::new`] configured from the environment: base URL from
    /// `BASALT_EMBED_BASE_URL` (default OpenAI's), key from `BASALT_EMBED_API_KEY` or else
    /// `OPENAI_API_KEY` (none: no `Authorization` header, as local servers want).
    pub fn from_env(model: &str, dim: usize) -> HttpEmbedder {
        let base =
            std::env::var(BASE_URL_ENV).unwrap_or_else(|_| "https://api.openai.com/v1".into());
        let key = std::env::var(API_KEY_ENV).or_else(|_| std::env::var("OPENAI_API_KEY")).ok();
        let e = HttpEmbedder::new(&base, model, dim);
        match key.filter(|k| !k.is_empty()) {
            Some(k) => e.api_key(&k),
            None => e,
        }
    }

    /// Sends `Authorization: Bearer <key>`.
    pub fn api_key(mut self, key: &str) -> HttpEmbedder {
        self.api_key = Some(key.to_string());
        self
    }

    /// At most `n` texts per request (at least 1).
    pub fn batch_size(mut self, n: usize) -> HttpEmbedder {
        self.batch_size = n.max(1);
        self
    }

    /// Retries after a 429, a 5xx, a failed connection or a timeout (0: none).
    pub fn max_retries(mut self, n: u32) -> HttpEmbedder {
        self.max_retries = n;
        self
    }

    /// The first retry's wait (doubled for each further one, unless the server says
    /// `Retry-After`).
    pub fn backoff(mut self, d: Duration) -> HttpEmbedder {
        self.backoff = d;
        self
    }

    /// The time limit of one request, connection and answer included.
    pub fn timeout(mut self, d: Duration) -> HttpEmbedder {
        self.agent = agent(d);
        self
    }

    /// One request for `texts`, retried as the module docs say.
    fn call(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let url = format!("{}/embeddings", self.base_url);
        let body = json!({"model": self.model, "input": texts, "encoding_format": "float"});
        let body = body.to_string();
        let mut attempt = 0u32;
        loop {
            let mut req = self.agent.post(&url).header("Content-Type", "application/json");
            if let Some(k) = &self.api_key {
                req = req.header("Authorization", format!("Bearer {k}"));
            }
            let (retry, wait, why) = match req.send(body.as_str()) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = resp
                        .body_mut()
                        .with_config()
                        .limit(256 << 20)
                        .read_to_string()
                        .map_err(|e| format!("{url}: reading the answer: {e}"))?;
                    if status == 200 {
                        return self.parse(&url, &text, texts.len());
                    }
                    let why = format!("{url}: HTTP {status}: {}", snippet(&text));
                    (status == 429 || status >= 500, after, why)
                }
                Err(e @ (ureq::Error::Timeout(_) | ureq::Error::Io(_))) => {
                    (true, None, format!("{url}: {e}"))
                }
                Err(e @ ureq::Error::ConnectionFailed) => (true, None, format!("{url}: {e}")),
                Err(e) => (false, None, format!("{url}: {e}")),
            };
            if !retry || attempt >= self.max_retries {
                let tries =
                    if attempt > 0 { format!(" (after {attempt} retries)") } else { String::new() };
                return Err(format!("{why}{tries}"));
            }
            std::thread::sleep(wait.unwrap_or(self.backoff * 2u32.saturating_pow(attempt)));
            attempt += 1;
        }
    }

    /// The vectors of an answer, in input order, each of the embedder's dimension.
    fn parse(&self, url: &str, text: &str, n: usize) -> Result<Vec<Vec<f32>>, String> {
        let bad = |why: &str| format!("{url}: unexpected answer ({why}): {}", snippet(text));
        let v: Json = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
        let data = v.get("data").and_then(Json::as_array).ok_or_else(|| bad("no data array"))?;
        if data.len() != n {
            return Err(bad(&format!("{} vectors for {n} texts", data.len())));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
        for (pos, d) in data.iter().enumerate() {
            let i = d.get("index").and_then(Json::as_u64).map_or(pos, |i| i as usize);
            let emb =
                d.get("embedding").and_then(Json::as_array).ok_or_else(|| bad("no embedding"))?;
            let vec: Option<Vec<f32>> = emb.iter().map(|x| x.as_f64().map(|f| f as f32)).collect();
            let vec = vec.ok_or_else(|| bad("a non-number in an embedding"))?;
            if vec.len() != self.dim {
                return Err(format!(
                    "{url}: model {} returned vectors of dimension {}, expected {}",
                    self.model,
                    vec.len(),
                    self.dim
                ));
            }
            let slot = out.get_mut(i).ok_or_else(|| bad(&format!("index {i} out of range")))?;
            *slot = Some(vec);
        }
        out.into_iter().map(|v| v.ok_or_else(|| bad("an index given twice"))).collect()
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build();
    ureq::Agent::new_with_config(config)
}

/// The start of a body, for error messages.
fn snippet(text: &str) -> String {
    let t: String = text.chars().take(200).collect();
    if t.len() < text.len() { format!("{t}…") } else { t }
}

impl Embedder for HttpEmbedder {
    fn model(&self) -> &str {
        &self.model
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch_size) {
            out.extend(self.call(chunk)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What the mock server saw: (authorization header, inputs) per request.
    type Seen = Arc<Mutex<Vec<(Option<String>, Vec<String>)>>>;

    /// A loopback server answering requests in turn with `script` (status, extra headers;
    /// a 200 answers with vectors `[len(text), index, 0, …]` of dimension `dim`).
    fn mock(script: Vec<(u16, &'static str)>, dim: usize) -> (String, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen: Seen = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for (status, headers) in script {
                let Ok((stream, _)) = listener.accept() else { return };
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let (mut len, mut auth) = (0usize, None);
                loop {
                    let mut line = String::new();
                    r.read_line(&mut line).unwrap();
                    let l = line.trim_end();
                    if l.is_empty() {
                        break;
                    }
                    let lower = l.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if lower.starts_with("authorization:") {
                        auth = Some(l["authorization:".len()..].trim().to_string());
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let req: Json = serde_json::from_slice(&body).unwrap();
                let inputs: Vec<String> = req["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                let answer = if status == 200 {
                    // Listed in reverse: the embedder must order by `index`.
                    let data: Vec<Json> = inputs
                        .iter()
                        .enumerate()
                        .rev()
                        .map(|(i, t)| {
                            let mut v = vec![0.0f32; dim];
                            v[0] = t.len() as f32;
                            v[1] = i as f32;
                            json!({"object": "embedding", "index": i, "embedding": v})
                        })
                        .collect();
                    json!({"object": "list", "data": data, "model": req["model"]}).to_string()
                } else {
                    json!({"error": {"message": "slow down"}}).to_string()
                };
                log.lock().unwrap().push((auth, inputs));
                let mut s = stream;
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        (url, seen)
    }

    #[test]
    fn batches_retries_on_429_and_orders_by_index() {
        let (url, seen) =
            mock(vec![(200, ""), (429, "Retry-After: 0\r\n"), (503, ""), (200, "")], 4);
        let e = HttpEmbedder::new(&url, "m", 4)
            .api_key("sk-test")
            .batch_size(3)
            .backoff(Duration::from_millis(1));
        let texts = ["a", "bb", "ccc", "dddd", "eeeee"];
        let got = e.embed(&texts).unwrap();
        let firsts: Vec<(f32, f32)> = got.iter().map(|v| (v[0], v[1])).collect();
        // Batches of 3 and 2 texts; index within each batch.
        assert_eq!(firsts, vec![(1.0, 0.0), (2.0, 1.0), (3.0, 2.0), (4.0, 0.0), (5.0, 1.0)]);
        let seen = seen.lock().unwrap();
        let inputs: Vec<usize> = seen.iter().map(|(_, i)| i.len()).collect();
        assert_eq!(inputs, vec![3, 2, 2, 2]); // the second batch sent three times
        assert!(seen.iter().all(|(a, _)| a.as_deref() == Some("Bearer sk-test")));
    }

    #[test]
    fn gives_up_after_the_retries_and_reports_bad_answers() {
        let (url, _) = mock(vec![(429, ""), (429, ""), (429, "")], 4);
        let e = HttpEmbedder::new(&url, "m", 4).max_retries(2).backoff(Duration::from_millis(1));
        let err = e.embed(&["x"]).unwrap_err();
        assert!(err.contains("HTTP 429") && err.contains("after 2 retries"), "{err}");
        // A client error is not retried.
        let (url, seen) = mock(vec![(401, ""), (200, "")], 4);
        let err = HttpEmbedder::new(&url, "m", 4).embed(&["x"]).unwrap_err();
        assert!(err.contains("HTTP 401"), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 1);
        // Vectors of another dimension.
        let (url, _) = mock(vec![(200, "")], 8);
        let err = HttpEmbedder::new(&url, "m", 4).embed(&["x"]).unwrap_err();
        assert!(err.contains("dimension 8, expected 4"), "{err}");
        // Nobody listening: connection refused, retried, then reported.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = HttpEmbedder::new(&format!("http://127.0.0.1:{port}/v1"), "m", 4)
            .max_retries(1)
            .backoff(Duration::from_millis(1));
        assert!(e.embed(&["x"]).is_err());
    }

    #[test]
    fn a_silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        // The server accepts and never answers (until the test is done): only the
        // client's timeout can end the call, and its error says so.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let hold = std::thread::spawn(move || {
            let s = listener.accept();
            let _ = wait.recv_timeout(Duration::from_secs(60));
            drop(s);
        });
        let e = HttpEmbedder::new(&url, "m", 4).max_retries(0).timeout(Duration::from_millis(200));
        let err = e.embed(&["x"]).unwrap_err();
        assert!(err.contains("timeout"), "{err}");
        done.send(()).unwrap();
        hold.join().unwrap();
    }
}
