//! `evo report RUN --out report.html`: the morning report of a search, one
//! self-contained HTML file (inline CSS and SVG, nothing fetched when viewed).
//!
//! Charts are drawn by `plotters` into SVG strings: best fitness against evaluations
//! and against wall time, the gate funnel, time against each knob, per-shape speedup
//! of the best variants over the baseline. Then the per-knob insights and the elite
//! table. Each chart sits in `<figure id="chart-...">` so tests can find it; points
//! are `<circle>` elements and bars `<rect>` elements in the bar colour.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value as Json;

use evo_run::inspect::{self as query, CandidateRow, RunStats};

use super::inspect;
use crate::output::outln;

/// Colour of the points in every scatter chart.
pub const POINT: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// Colour of the best-so-far line.
pub const BEST: RGBColor = RGBColor(0xd6, 0x27, 0x28);
/// Colour of the funnel's bars.
pub const FUNNEL_BAR: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
/// Colours of the elites' bars in the per-shape chart (rank 1, 2, 3, ...).
pub const ELITE_BARS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
];
/// Elites drawn in the per-shape chart.
pub const SHAPE_CHART_ELITES: usize = 3;

/// One candidate with a result, in result order.
struct ResultPoint {
    /// 1-based position among all results (failures included).
    order: usize,
    /// Seconds from the first proposal of the run.
    seconds: f64,
    fitness: Option<f64>,
    knobs: BTreeMap<String, String>,
    /// Geometric mean over shapes of the median time, when every shape was timed.
    geomean_us: Option<f64>,
}

pub fn run(db: &str, run: Option<&str>, out: &Path, top: usize, json: bool) -> Result<ExitCode> {
    crate::output::check_out_file(out)?;
    let rt = crate::setup::runtime()?;
    let (run, stats, elites, base, points, insights) = rt.block_on(async {
        let store = query::open_existing(db).await?;
        let run = query::find_run(&store, run, db).await?;
        let stats = query::run_stats(&store, &run).await?;
        let elites = query::ranked(&store, &run, top.max(SHAPE_CHART_ELITES)).await?;
        let base = query::baselines(&store, &run).await?;
        let mut cands: Vec<evo_store::Candidate> = store
            .candidates(run.id)
            .await?
            .into_iter()
            .filter(|c| c.status.is_some())
            .collect();
        let start = cands.iter().map(|c| c.created_at.clone()).min();
        cands.sort_by(|a, b| a.evaluated_at.cmp(&b.evaluated_at).then(a.id.cmp(&b.id)));
        let mut points = Vec::new();
        for (i, c) in cands.iter().enumerate() {
            let times: Vec<f64> = store
                .measurements(c.id)
                .await?
                .iter()
                .filter_map(|m| m.median_us)
                .filter(|t| *t > 0.0)
                .collect();
            let complete = !times.is_empty() && times.len() >= base.len();
            points.push(ResultPoint {
                order: i + 1,
                seconds: match (&start, &c.evaluated_at) {
                    (Some(a), Some(b)) => query::seconds_between(a, b).unwrap_or(0.0),
                    _ => 0.0,
                },
                fitness: c.fitness.filter(|f| f.is_finite()),
                knobs: query::knobs(&c.genome),
                geomean_us: complete.then(|| {
                    (times.iter().map(|t| t.ln()).sum::<f64>() / times.len() as f64).exp()
                }),
            });
        }
        let insights = store
            .latest_generation(run.id)
            .await?
            .map(|g| g.insights)
            .unwrap_or(Json::Null);
        anyhow::Ok((run, stats, elites, base, points, insights))
    })?;
    let html = render_html(&run, &stats, &elites, &base, &points, &insights, top)?;
    std::fs::write(out, &html).with_context(|| format!("writing {}", out.display()))?;
    if json {
        crate::output::print_json(&serde_json::json!({
            "run": run.name,
            "out": out.display().to_string(),
            "bytes": html.len(),
            "results": points.len(),
        }))?;
    } else {
        outln!(
            "report of run `{}` ({} results, {} with a fitness) written to {}",
            run.name,
            points.len(),
            points.iter().filter(|p| p.fitness.is_some()).count(),
            out.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Draws into an SVG string of `size` pixels.
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(buf)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e:?}")
}

const FONT: &str = "sans-serif";

/// The series legend every chart draws, at `position`.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(plot_err)
}

/// A message in place of a chart without data.
fn empty_chart(size: (u32, u32), title: &str, message: &str) -> Result<String> {
    svg(size, |root| {
        root.draw(&Text::new(
            format!("{title}: {message}"),
            (20, size.1 as i32 / 2),
            (FONT, 16).into_font(),
        ))
        .map_err(plot_err)
    })
}

/// Padded range of values (never empty).
fn range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let span = (hi - lo).max(hi.abs() * 0.05).max(1e-9);
    (lo - span * pad, hi + span * pad)
}

/// Fitness of every timed candidate against `x`, with the best-so-far line.
fn fitness_chart(
    points: &[(f64, f64)],
    x_desc: &str,
    title: &str,
    integer_x: bool,
) -> Result<String> {
    let size = (900, 380);
    if points.is_empty() {
        return empty_chart(size, title, "no candidate was timed");
    }
    let (x0, x1) = range(points.iter().map(|p| p.0), 0.03);
    // 1.0 (the baseline's speed) always in view.
    let (y0, y1) = range(points.iter().map(|p| p.1).chain([1.0]), 0.08);
    let mut best = Vec::new();
    let mut b = f64::NEG_INFINITY;
    for &(x, y) in points {
        if y > b {
            if b.is_finite() {
                best.push((x, b));
            }
            b = y;
        }
        best.push((x, b));
    }
    if let Some(&(_, last)) = best.last() {
        best.push((x1, last));
    }
    svg(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(62)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("fitness (× baseline speed)")
            .x_label_formatter(&|x| {
                if integer_x {
                    format!("{x:.0}")
                } else {
                    // Axis steps are 1, 2 or 5 × 10^k: at most 3 decimals, no float noise.
                    let t = format!("{x:.3}");
                    t.trim_end_matches('0').trim_end_matches('.').to_string()
                }
            })
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, POINT.mix(0.55).filled())),
            )
            .map_err(plot_err)?
            .label("candidate")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], POINT.stroke_width(3)));
        chart
            .draw_series(LineSeries::new(best, BEST.stroke_width(2)))
            .map_err(plot_err)?
            .label("best so far")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BEST.stroke_width(2)));
        if y0 < 1.0 && y1 > 1.0 {
            chart
                .draw_series(LineSeries::new(
                    vec![(x0, 1.0), (x1, 1.0)],
                    BLACK.mix(0.4).stroke_width(1),
                ))
                .map_err(plot_err)?
                .label("baseline (1.0)")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.4).stroke_width(1))
                });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// How many candidates reached each stage of the gates.
fn funnel_chart(stats: &RunStats) -> Result<String> {
    let size = (900, 360);
    let stages = &stats.funnel;
    if stages.first().is_none_or(|s| s.reached == 0) {
        return empty_chart(size, "Gate funnel", "no candidate has a result");
    }
    let top = stages[0].reached as f64;
    svg(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Gate funnel: candidates reaching each stage", (FONT, 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(62)
            .build_cartesian_2d((0..stages.len() - 1).into_segmented(), 0.0..top * 1.15)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc("candidates")
            .light_line_style(TRANSPARENT)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => {
                    stages.get(*i).map_or(String::new(), |s| s.stage.clone())
                }
                _ => String::new(),
            })
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(stages.iter().enumerate().map(|(i, s)| {
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), s.reached as f64),
                    ],
                    FUNNEL_BAR.filled(),
                );
                r.set_margin(0, 0, 14, 14);
                r
            }))
            .map_err(plot_err)?;
        chart
            .draw_series(stages.iter().enumerate().map(|(i, s)| {
                Text::new(
                    format!("{}", s.reached),
                    (SegmentValue::CenterOf(i), s.reached as f64 + top * 0.02),
                    (FONT, 14)
                        .into_font()
                        .into_text_style(root)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(plot_err)?;
        Ok(())
    })
}

/// 1, 2, 5 × 10^k between `lo` and `hi` (labels of a log axis).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powi(lo.max(1e-12).log10().floor() as i32);
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * decade;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

/// Geometric-mean time of every fully timed candidate against one knob's values.
fn knob_chart(knob: &str, points: &[&ResultPoint]) -> Result<String> {
    let size = (440, 300);
    let mut values: Vec<String> = points
        .iter()
        .filter_map(|p| p.knobs.get(knob).cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // Numbers in numeric order.
    values.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
        _ => a.cmp(b),
    });
    let data: Vec<(usize, f64)> = points
        .iter()
        .filter_map(|p| {
            let v = p.knobs.get(knob)?;
            Some((values.iter().position(|x| x == v)?, p.geomean_us?))
        })
        .collect();
    if data.is_empty() {
        return empty_chart(size, knob, "no timed candidate");
    }
    let lo = data.iter().map(|d| d.1).fold(f64::INFINITY, f64::min);
    let hi = data.iter().map(|d| d.1).fold(0.0, f64::max);
    svg(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(knob, (FONT, 17))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(58)
            .build_cartesian_2d(
                (0..values.len() - 1).into_segmented(),
                (lo * 0.9..hi * 1.1)
                    .log_scale()
                    .with_key_points(log_ticks(lo * 0.9, hi * 1.1)),
            )
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc("geomean µs (log)")
            .light_line_style(TRANSPARENT)
            .axis_desc_style((FONT, 13))
            .label_style((FONT, 12))
            .y_label_formatter(&|y| {
                if *y >= 1.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y}")
                }
            })
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => values.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(data.iter().map(|&(i, y)| {
                Circle::new((SegmentValue::CenterOf(i), y), 4, POINT.mix(0.35).filled())
            }))
            .map_err(plot_err)?;
        Ok(())
    })
}

/// Speedup over the baseline per shape for the best `elites`.
fn shapes_chart(elites: &[CandidateRow], labels: &[(String, String)]) -> Result<String> {
    let size = (900, 380);
    let elites: Vec<&CandidateRow> = elites.iter().take(SHAPE_CHART_ELITES).collect();
    let bars: Vec<(usize, usize, f64)> = labels
        .iter()
        .enumerate()
        .flat_map(|(si, (_, key))| {
            elites.iter().enumerate().filter_map(move |(ei, e)| {
                let s = e.shapes.iter().find(|s| &s.shape == key)?;
                Some((si, ei, s.speedup?))
            })
        })
        .collect();
    if bars.is_empty() {
        return empty_chart(
            size,
            "Per-shape speedup",
            "no elite with times and a baseline",
        );
    }
    let group = elites.len() + 1; // one gap segment between shapes
    let hi = bars.iter().map(|b| b.2).fold(1.0, f64::max) * 1.18;
    svg(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Per shape: best variants against the baseline (baseline time / time)",
                (FONT, 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(62)
            .build_cartesian_2d((0..labels.len() * group - 2).into_segmented(), 0.0..hi)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(labels.len() * group)
            .y_desc("speedup over baseline")
            .light_line_style(TRANSPARENT)
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if i % group == (group - 1) / 2 => {
                    labels.get(i / group).map_or(String::new(), |l| l.0.clone())
                }
                _ => String::new(),
            })
            .draw()
            .map_err(plot_err)?;
        for (ei, e) in elites.iter().enumerate() {
            let colour = ELITE_BARS[ei % ELITE_BARS.len()];
            chart
                .draw_series(bars.iter().filter(|b| b.1 == ei).map(|&(si, _, v)| {
                    let x = si * group + ei;
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(x), 0.0),
                            (SegmentValue::Exact(x + 1), v),
                        ],
                        colour.filled(),
                    );
                    r.set_margin(0, 0, 2, 2);
                    r
                }))
                .map_err(plot_err)?
                .label(format!("#{} (id {})", ei + 1, e.id))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(8))
                });
        }
        let end = labels.len() * group - 1;
        chart
            .draw_series(LineSeries::new(
                vec![
                    (SegmentValue::Exact(0), 1.0),
                    (SegmentValue::Exact(end), 1.0),
                ],
                BLACK.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label("baseline = 1")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(2)));
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

fn figure(out: &mut String, id: &str, svg: &str, caption: &str) {
    let _ = write!(
        out,
        "<figure id=\"{id}\">{svg}<figcaption>{}</figcaption></figure>",
        esc(caption)
    );
}

fn insights_html(insights: &Json) -> String {
    let Some(knobs) = insights.get("knobs").and_then(|k| k.as_array()) else {
        return "<p>No insights recorded (no generation finished).</p>".into();
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<p>Per-knob statistics of the {} elites after the last generation ({} evaluated, {} failed): the share of elites with each value (bar), the mean and best fitness of candidates with it, and how many failed.</p><div class=\"insights\">",
        insights.get("elites").map_or("?".into(), |v| v.to_string()),
        insights.get("evaluated").map_or("?".into(), |v| v.to_string()),
        insights.get("failed").map_or("?".into(), |v| v.to_string()),
    );
    for k in knobs {
        let name = k.get("knob").and_then(|n| n.as_str()).unwrap_or("?");
        let _ = write!(
            h,
            "<table class=\"insight\"><caption>{}</caption><tr><th>value</th><th>elite share</th><th>mean fit.</th><th>best fit.</th><th>eval.</th><th>failed</th></tr>",
            esc(name)
        );
        for v in k
            .get("values")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let value = match v.get("value") {
                Some(Json::String(s)) => s.clone(),
                Some(x) => x.to_string(),
                None => "?".into(),
            };
            let share = v.get("elite_share").and_then(|x| x.as_f64()).unwrap_or(0.0);
            let f = |key: &str| inspect::opt(v.get(key).and_then(|x| x.as_f64()), 3);
            let n = |key: &str| v.get(key).and_then(|x| x.as_u64()).unwrap_or(0);
            let _ = write!(
                h,
                "<tr><td>{}</td><td><span class=\"bar\" style=\"width:{:.0}px\"></span> {:.0}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&value),
                share * 80.0,
                share * 100.0,
                f("mean_fitness"),
                f("best_fitness"),
                n("evaluated_count"),
                n("failed_count"),
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</div>");
    h
}

fn elite_table(rows: &[CandidateRow], labels: &[(String, String)]) -> String {
    let (varying, common) = inspect::varying_knobs(rows);
    let mut h = String::new();
    if !common.is_empty() {
        let _ = write!(h, "<p>Every row has {}.</p>", esc(&common.join(" ")));
    }
    let with_resources = rows
        .iter()
        .any(|r| r.resources != query::ResourceSummary::default());
    h.push_str("<div class=\"wide\"><table id=\"elites\" class=\"elites\"><thead><tr><th>rank</th><th>id</th><th>hash</th><th>gen</th><th>fitness</th><th>status</th>");
    for k in &varying {
        let _ = write!(h, "<th>{}</th>", esc(k));
    }
    for (l, _) in labels {
        let _ = write!(h, "<th>{l} µs<br>TFLOP/s</th>");
    }
    if with_resources {
        h.push_str("<th>regs</th><th>smem</th><th>spill</th><th>TC ops</th>");
    }
    h.push_str("</tr></thead><tbody>");
    for r in rows {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td>",
            r.rank.unwrap_or(0),
            r.id,
            esc(&r.hash[..8.min(r.hash.len())]),
            r.generation,
            inspect::opt(r.fitness, 4),
            esc(&r.status)
        );
        for k in &varying {
            let _ = write!(
                h,
                "<td>{}</td>",
                esc(r.knobs.get(k).map_or("-", String::as_str))
            );
        }
        for (_, key) in labels {
            match r.shapes.iter().find(|s| &s.shape == key) {
                Some(s) => {
                    let _ = write!(
                        h,
                        "<td>{}<br><small>{}</small></td>",
                        inspect::opt(s.median_us, 2),
                        inspect::opt(s.tflops, 1)
                    );
                }
                None => h.push_str("<td>-</td>"),
            }
        }
        if with_resources {
            let res = &r.resources;
            let o = |v: Option<u64>| v.map_or("-".into(), |x| x.to_string());
            let _ = write!(
                h,
                "<td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                o(res.registers),
                res.smem_bytes.map_or("-".into(), crate::output::bytes),
                res.spill_bytes.map_or("-".into(), crate::output::bytes),
                o(res.tensor_ops)
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table></div>");
    h
}

const CSS: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\
h1{font-size:24px}h1 code{font-size:24px}.wide{overflow-x:auto}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ccc}\
figure{margin:12px 0;display:inline-block;vertical-align:top}\
figure svg{max-width:100%;height:auto;border:1px solid #ddd}\
figcaption{font-size:13px;color:#555;max-width:880px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}\
th{background:#f2f2f2}table.facts td{text-align:left}\
.insights{display:flex;flex-wrap:wrap;gap:14px}.insight caption{font-weight:bold;text-align:left}\
.bar{display:inline-block;height:10px;background:#2ca02c;vertical-align:middle}\
.knobs{display:flex;flex-wrap:wrap;gap:6px}code{font-size:12px}";

fn render_html(
    run: &evo_store::Run,
    stats: &RunStats,
    elites: &[CandidateRow],
    base: &BTreeMap<String, f64>,
    points: &[ResultPoint],
    insights: &Json,
    top: usize,
) -> Result<String> {
    let labels = inspect::shape_labels(base, elites, &evo_run::inspect::shape_order(run));
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>evo report: {}</title><style>{CSS}</style></head><body>\n",
        esc(&run.name)
    );
    let _ = write!(
        h,
        "<h1>evo report: run <code>{}</code></h1>",
        esc(&run.name)
    );
    let mut facts: Vec<(&str, String)> = vec![
        (
            "problem / family",
            format!("{} / {}", run.problem, run.family),
        ),
        ("status", run.status.to_string()),
        ("strategy, seed", format!("{}, {}", run.strategy, run.seed)),
        ("evaluator", run.evaluator.clone()),
        ("device", run.device.clone().unwrap_or_else(|| "-".into())),
        (
            "driver, NVRTC, arch",
            format!(
                "{}, {}, {}",
                run.driver.as_deref().unwrap_or("-"),
                run.nvrtc_version.as_deref().unwrap_or("-"),
                run.arch.as_deref().unwrap_or("-")
            ),
        ),
        (
            "started, last change",
            format!("{}, {}", run.created_at, run.updated_at),
        ),
        (
            "candidates",
            format!(
                "{} ({} pending), {} generations",
                stats.candidates, stats.pending, stats.generations
            ),
        ),
        (
            "best fitness",
            elites
                .first()
                .and_then(|e| e.fitness)
                .map_or("-".into(), |f| {
                    format!(
                        "{f:.4}× the baseline's speed (candidate {}, {})",
                        elites[0].id, elites[0].status
                    )
                }),
        ),
        (
            "evaluations per hour",
            format!(
                "{} over the run, {} in the last invocation",
                inspect::opt(stats.evaluations_per_hour, 0),
                inspect::opt(stats.last_invocation_evaluations_per_hour, 0)
            ),
        ),
        (
            "GPU busy fraction",
            stats.gpu_busy_fraction.map_or("-".into(), |x| {
                format!("{:.1}% (last invocation)", x * 100.0)
            }),
        ),
    ];
    for (l, k) in &labels {
        facts.push((
            "shape",
            format!(
                "{l} = {k}{}",
                base.get(k)
                    .map_or(String::new(), |b| format!(" (baseline {b:.2} µs)"))
            ),
        ));
    }
    h.push_str("<table class=\"facts\">");
    for (k, v) in &facts {
        let _ = write!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    h.push_str("</table>\n");

    h.push_str("<h2>Progress</h2>\n");
    let by_eval: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.order as f64, p.fitness?)))
        .collect();
    figure(
        &mut h,
        "chart-fitness-evaluations",
        &fitness_chart(
            &by_eval,
            "evaluations (results in order)",
            "Fitness against evaluations",
            true,
        )?,
        "Each point is a timed candidate (evaluated or regressed); the line is the best so far. Fitness is the geometric mean over shapes of baseline time / candidate time.",
    );
    let span = points.iter().map(|p| p.seconds).fold(0.0, f64::max);
    let (unit, div) = if span < 120.0 {
        ("seconds", 1.0)
    } else if span < 7200.0 {
        ("minutes", 60.0)
    } else {
        ("hours", 3600.0)
    };
    let by_time: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.seconds / div, p.fitness?)))
        .collect();
    figure(
        &mut h,
        "chart-fitness-time",
        &fitness_chart(
            &by_time,
            &format!("wall time since the first proposal ({unit})"),
            "Fitness against wall time",
            false,
        )?,
        "The same candidates against the time their result arrived.",
    );

    h.push_str("<h2>Gates</h2>\n");
    figure(
        &mut h,
        "chart-funnel",
        &funnel_chart(stats)?,
        "Candidates with a result that reached each stage; each drop is the candidates that failed the gate (table below).",
    );
    h.push_str(
        "<table><tr><th>status</th><th>gate</th><th>count</th><th>most common reason</th></tr>",
    );
    for s in &stats.by_status {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            esc(s.status.name()),
            esc(s.gate.map_or("-", |g| g.name())),
            s.count,
            esc(s.reasons.first().map_or("", |r| r.0.as_str()))
        );
    }
    h.push_str("</table>\n");

    h.push_str("<h2>Time against each knob</h2>\n<div class=\"knobs\">");
    let timed: Vec<&ResultPoint> = points.iter().filter(|p| p.geomean_us.is_some()).collect();
    let knob_names: BTreeSet<&String> = points.iter().flat_map(|p| p.knobs.keys()).collect();
    for k in knob_names {
        figure(
            &mut h,
            &format!("chart-knob-{k}"),
            &knob_chart(k, &timed)?,
            "",
        );
    }
    let _ = write!(
        h,
        "</div><p>Each point is a candidate timed on every shape ({} of them): the geometric mean of its median times, against the knob's value.</p>",
        timed.len()
    );

    h.push_str("<h2>Best variants per shape</h2>\n");
    figure(
        &mut h,
        "chart-shapes",
        &shapes_chart(elites, &labels)?,
        "Baseline time / variant time per shape for the fittest variants; above the line is faster than the baseline.",
    );

    h.push_str("<h2>Insights per knob</h2>\n");
    h.push_str(&insights_html(insights));

    let _ = write!(h, "<h2>Elites (top {})</h2>", top.min(elites.len()));
    let shown: Vec<CandidateRow> = elites.iter().take(top).cloned().collect();
    h.push_str(&elite_table(&shown, &labels));
    if shown
        .iter()
        .all(|r| r.resources == query::ResourceSummary::default())
    {
        h.push_str("<p><small>No resource record (e.g. a replayed run), so no register, shared-memory, spill and tensor-core columns: <code>evo show ID --log</code> compiles a candidate and prints its ptxas report.</small></p>");
    }
    let _ = write!(
        h,
        "<p><small>Generated by evo {}. Self-contained: no script, no network.</small></p></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    Ok(h)
}
