//! Timing: runs one metric on one engine in the metric's mode and returns its figure and the
//! digest of a result, per `benches/README.md` (*Fairness rules*) (warm-ups, timed iterations, per-call medians of
//! batched micro-operations, untimed reopen / setup).

use std::time::{Duration, Instant};

use basalt_benches::check::Digest;

use crate::engines::{Engine, Res};
use crate::metrics::{Metric, Mode, Work};

/// Timing options.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Untimed warm-up iterations (or samples).
    pub warmup: usize,
    /// Timed iterations (or samples).
    pub iterations: usize,
    /// Calls per sample of a write micro-operation (the same on every engine).
    pub write_batch: usize,
    /// Minimum duration of one micro-operation sample.
    pub min_sample: Duration,
    /// Quick mode: one call per sample.
    pub quick: bool,
}

/// The outcome of a metric on one engine.
pub struct Figure {
    /// Seconds per operation (median).
    pub secs: f64,
    /// Digest of the checked result.
    pub digest: Digest,
}

/// The median (mean of the middle two for even counts; NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn timed(work: &Work, e: &mut dyn Engine, call: usize) -> Res<(f64, crate::engines::Out)> {
    let t = Instant::now();
    let out = work(e, call)?;
    Ok((t.elapsed().as_secs_f64(), out))
}

/// Runs `m` on `e` with `work`.
pub fn measure(m: &Metric, work: &Work, e: &mut dyn Engine, t: &Timing) -> Res<Figure> {
    if let Some(pre) = &m.pre {
        pre(e, 0)?;
    }
    let setup = |e: &mut dyn Engine, call: usize| -> Res<()> {
        match (&m.setup, m.mode) {
            (Some(s), _) => s(e, call).map(|_| ()),
            (None, Mode::Cold) => e.reopen(),
            _ => Ok(()),
        }
    };
    match m.mode {
        Mode::Once => {
            setup(e, 0)?;
            let (secs, out) = timed(work, e, 0)?;
            Ok(Figure { secs, digest: out.digest() })
        }
        Mode::Plain | Mode::Cold | Mode::Setup => {
            let mut call = 0;
            for _ in 0..t.warmup {
                setup(e, call)?;
                work(e, call)?;
                call += 1;
            }
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..t.iterations.max(1) {
                setup(e, call)?;
                let (s, out) = timed(work, e, call)?;
                times.push(s);
                last = Some(out);
                call += 1;
            }
            let digest = last.map(|o| o.digest()).unwrap_or_default();
            Ok(Figure { secs: median(times), digest })
        }
        Mode::Micro | Mode::MicroWrite => {
            // Call 0 is the checked call (the workload's own constants); timed calls rotate.
            let mut call = 1;
            let batch = if t.quick {
                1
            } else if m.mode == Mode::MicroWrite {
                t.write_batch
            } else {
                // The first call pays one-time costs (preparing the statement, first
                // touches): it runs untimed. The calls per sample then come from a run of
                // calls that lasts a tenth of a sample, so one noisy call cannot set it.
                work(e, call)?;
                call += 1;
                let target = t.min_sample.as_secs_f64();
                let mut calls = 1usize;
                loop {
                    let start = Instant::now();
                    for _ in 0..calls {
                        work(e, call)?;
                        call += 1;
                    }
                    let per_call = start.elapsed().as_secs_f64() / calls as f64;
                    if per_call * calls as f64 >= target / 10.0 || calls >= 100_000 {
                        break ((target / per_call.max(1e-8)).ceil() as usize).clamp(1, 100_000);
                    }
                    calls *= 4;
                }
            };
            let sample = |e: &mut dyn Engine, call: &mut usize| -> Res<f64> {
                let start = Instant::now();
                for _ in 0..batch {
                    work(e, *call)?;
                    *call += 1;
                }
                Ok(start.elapsed().as_secs_f64() / batch as f64)
            };
            for _ in 0..t.warmup {
                sample(e, &mut call)?;
            }
            let mut times = Vec::new();
            for _ in 0..t.iterations.max(1) {
                times.push(sample(e, &mut call)?);
            }
            let out = work(e, 0)?;
            Ok(Figure { secs: median(times), digest: out.digest() })
        }
    }
}
