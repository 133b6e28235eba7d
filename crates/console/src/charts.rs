//! An endpoint's success rate and latency over a window, drawn on the
//! server as inline SVG (no script, no image request): one bar per time
//! bucket, its exact figures in a `title` tooltip. Colours come from the
//! stylesheet's classes, never from inline styles (the policy forbids
//! them).

use domain::Timestamp;
use maud::{html, Markup};
use store::webhooks::activity::ActivityBucket;

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 150.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 22.0;

/// The attempts of one window, in consecutive buckets from `since`.
pub struct Window {
    pub name: &'static str,
    pub since: Timestamp,
    pub bucket_ms: i64,
    pub buckets: Vec<ActivityBucket>,
}

impl Window {
    fn attempts(&self) -> i64 {
        self.buckets.iter().map(ActivityBucket::attempts).sum()
    }

    fn succeeded(&self) -> i64 {
        self.buckets.iter().map(|b| b.succeeded).sum()
    }

    /// The window's success rate in percent, if it had attempts.
    pub fn success_rate(&self) -> Option<f64> {
        let n = self.attempts();
        (n > 0).then(|| 100.0 * self.succeeded() as f64 / n as f64)
    }

    /// The window's mean attempt duration, if it had attempts.
    pub fn mean_ms(&self) -> Option<f64> {
        let n = self.attempts();
        let total: i64 = self.buckets.iter().map(|b| b.total_ms).sum();
        (n > 0).then(|| total as f64 / n as f64)
    }

    fn start_of(&self, i: usize) -> Timestamp {
        Timestamp::from_millis(self.since.millis() + i as i64 * self.bucket_ms)
    }

    fn slot(&self) -> f64 {
        (WIDTH - LEFT - RIGHT) / self.buckets.len().max(1) as f64
    }
}

/// `HH:MM` (UTC) of a moment.
fn clock(t: Timestamp) -> String {
    let s = t.to_rfc3339();
    s.get(11..16).unwrap_or_default().to_owned()
}

/// The window's summary line and its two charts.
pub fn window(w: &Window) -> Markup {
    let rate = w.success_rate().map_or_else(
        || "no attempts".to_owned(),
        |r| format!("{r:.1} % succeeded"),
    );
    let mean = w
        .mean_ms()
        .map_or_else(String::new, |m| format!(", mean latency {m:.0} ms"));
    html! {
        section.window data-window=(w.name) {
            h3 { "Last " (w.name) }
            p.summary { (w.attempts()) " attempts, " (rate) (mean) }
            div.charts {
                figure { figcaption { "Success rate" } (success_chart(w)) }
                figure { figcaption { "Latency (mean bar, longest tick)" } (latency_chart(w)) }
            }
        }
    }
}

fn frame(label: &str, w: &Window, top_label: &str, inner: Markup) -> Markup {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let every = (w.buckets.len() / 6).max(1);
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) }
            width=(WIDTH) height=(HEIGHT) role="img" aria-label=(label) {
            title { (label) }
            line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(TOP + plot_h) {}
            line.axis x1=(LEFT) y1=(TOP + plot_h) x2=(WIDTH - RIGHT) y2=(TOP + plot_h) {}
            line.grid x1=(LEFT) y1=(TOP + plot_h / 2.0) x2=(WIDTH - RIGHT) y2=(TOP + plot_h / 2.0) {}
            text.label x=(LEFT - 4.0) y=(TOP + 8.0) text-anchor="end" { (top_label) }
            text.label x=(LEFT - 4.0) y=(TOP + plot_h) text-anchor="end" { "0" }
            (inner)
            @for i in (0..w.buckets.len()).step_by(every) {
                text.label x=(LEFT + i as f64 * w.slot()) y=(HEIGHT - 6.0) { (clock(w.start_of(i))) }
            }
        }
    }
}

fn success_chart(w: &Window) -> Markup {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = w.slot();
    let label = format!("Success rate per bucket, last {}", w.name);
    let bars = html! {
        @for (i, b) in w.buckets.iter().enumerate() {
            @let x = LEFT + i as f64 * slot + 1.0;
            @let bw = (slot - 2.0).max(1.0);
            @if b.attempts() == 0 {
                rect.empty x=(x) y=(TOP + plot_h - 2.0) width=(bw) height="2" {
                    title { (clock(w.start_of(i))) ": no attempts" }
                }
            } @else {
                @let rate = b.succeeded as f64 / b.attempts() as f64;
                @let h = (rate * plot_h).max(2.0);
                @let class = if rate >= 0.95 { "ok" } else if rate >= 0.5 { "warn" } else { "bad" };
                rect class={ "bar " (class) } x=(x) y=(TOP + plot_h - h) width=(bw) height=(h) {
                    title { (clock(w.start_of(i))) ": " (format!("{:.1}", rate * 100.0)) " % of "
                        (b.attempts()) " attempts succeeded" }
                }
            }
        }
    };
    frame(&label, w, "100 %", bars)
}

fn latency_chart(w: &Window) -> Markup {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = w.slot();
    let top = w.buckets.iter().map(|b| b.max_ms).max().unwrap_or(0).max(1) as f64;
    let label = format!("Attempt latency per bucket, last {}", w.name);
    let bars = html! {
        @for (i, b) in w.buckets.iter().enumerate() {
            @if b.attempts() > 0 {
                @let x = LEFT + i as f64 * slot + 1.0;
                @let bw = (slot - 2.0).max(1.0);
                @let mean = b.total_ms as f64 / b.attempts() as f64;
                @let h = (mean / top * plot_h).max(1.0);
                @let peak = TOP + plot_h - b.max_ms as f64 / top * plot_h;
                rect.bar.latency x=(x) y=(TOP + plot_h - h) width=(bw) height=(h) {
                    title { (clock(w.start_of(i))) ": mean " (format!("{mean:.0}")) " ms, longest "
                        (b.max_ms) " ms over " (b.attempts()) " attempts" }
                }
                line.peak x1=(x) y1=(peak) x2=(x + bw) y2=(peak) {}
            }
        }
    };
    frame(&label, w, &format!("{top:.0} ms"), bars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(buckets: Vec<ActivityBucket>) -> Window {
        Window {
            name: "hour",
            since: Timestamp::from_millis(0),
            bucket_ms: 300_000,
            buckets,
        }
    }

    #[test]
    fn an_empty_window_draws_empty_buckets() {
        let svg = window(&w(vec![ActivityBucket::default(); 12])).into_string();
        assert!(svg.contains("no attempts"));
        assert!(svg.contains("<svg"));
        assert!(
            !svg.contains("style="),
            "no inline style: the policy forbids it"
        );
    }

    #[test]
    fn rates_and_latency_are_summed_over_the_window() {
        let b = ActivityBucket {
            succeeded: 3,
            failed: 1,
            total_ms: 400,
            max_ms: 250,
        };
        let window = w(vec![b, ActivityBucket::default()]);
        assert_eq!(window.success_rate(), Some(75.0));
        assert_eq!(window.mean_ms(), Some(100.0));
        let svg = super::window(&window).into_string();
        assert!(svg.contains("75.0 % of 4 attempts succeeded"));
        assert!(svg.contains("longest 250 ms"));
    }
}
