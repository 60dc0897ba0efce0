//! SVG charts of the results (plotters, SVG backend: no fonts or C
//! libraries needed; the viewer renders the text).

use std::path::Path;

use plotters::prelude::*;

use crate::contenders::BenchError;
use crate::measure::us;
use crate::scenarios::contention::Contention;
use crate::scenarios::handoff::Handoff;
use crate::scenarios::uncontended::Uncontended;

/// A stable color per contender, by name.
fn color(name: &str) -> RGBColor {
    let name = name.to_ascii_lowercase();
    if name.starts_with("floor") {
        RGBColor(90, 90, 90)
    } else if name.starts_with("lock-runtime fair") {
        RGBColor(158, 202, 225)
    } else if name.starts_with("lock-runtime") || name.starts_with('#') {
        RGBColor(31, 119, 180)
    } else if name.contains("hand") && name.contains("10ms") {
        RGBColor(255, 187, 120)
    } else if name.contains("hand") {
        RGBColor(255, 127, 14)
    } else if name.contains("rslock") && name.contains("10") {
        RGBColor(152, 223, 138)
    } else if name.contains("rslock") {
        RGBColor(44, 160, 44)
    } else {
        RGBColor(127, 127, 127)
    }
}

fn err(e: impl std::fmt::Display) -> BenchError {
    format!("chart: {e}").into()
}

/// Latency percentile curves: uncontended lock + unlock, and handoff.
pub fn latency(
    path: &Path,
    uncontended: &mut Uncontended,
    handoff: Option<&mut Handoff>,
) -> Result<(), BenchError> {
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = root.split_horizontally(600);

    let mut curves: Vec<(String, Vec<(f64, f64)>)> = uncontended
        .rows
        .iter_mut()
        .map(|row| (row.name.to_owned(), row.samples.curve()))
        .collect();
    let rtt = us(uncontended.rtt.p50());
    let ymax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().filter(|(p, _)| *p <= 99.0).map(|(_, v)| *v))
        .fold(0.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&left)
        .caption("Uncontended lock + unlock (one task)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..100f64, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (µs)")
        .draw()
        .map_err(err)?;
    for (name, curve) in curves.drain(..) {
        let c = color(&name);
        chart
            .draw_series(LineSeries::new(
                curve.into_iter().filter(|(p, _)| *p <= 99.0),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, rtt), (100.0, rtt)],
            BLACK.mix(0.5).stroke_width(1),
        ))
        .map_err(err)?
        .label("one PING round trip (p50)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.5)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;

    if let Some(handoff) = handoff {
        let rtt = us(handoff.rtt.p50());
        let curves: Vec<(String, Vec<(f64, f64)>)> = handoff
            .rows
            .iter_mut()
            .map(|row| (row.short_name.clone(), row.samples.curve()))
            .collect();
        let ymax = curves
            .iter()
            .flat_map(|(_, c)| c.iter().filter(|(p, _)| *p <= 99.0).map(|(_, v)| *v))
            .fold(rtt, f64::max)
            * 1.2;
        let ymin = curves
            .iter()
            .flat_map(|(_, c)| c.iter().map(|(_, v)| *v))
            .fold(rtt, f64::min)
            * 0.7;
        let mut chart = ChartBuilder::on(&right)
            .caption(
                "Handoff: release → waiter holds the lock",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..100f64, (ymin..ymax).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("latency (µs, log scale)")
            .draw()
            .map_err(err)?;
        for (name, curve) in curves {
            let c = color(&name);
            chart
                .draw_series(LineSeries::new(
                    curve.into_iter().filter(|(p, _)| *p <= 99.0),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .draw_series(LineSeries::new(
                [(0.0, rtt), (100.0, rtt)],
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(err)?
            .label("one PING round trip (p50)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.5)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One bar panel: a value per contender.
fn bars(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    names: &[String],
    values: &[f64],
    limit: Option<(f64, &str)>,
) -> Result<(), BenchError> {
    let n = names.len();
    let top = values
        .iter()
        .copied()
        .chain(limit.map(|(v, _)| v))
        .fold(0.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(20)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n as f64, 0f64..top.max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    chart
        .draw_series(names.iter().zip(values).enumerate().map(|(i, (name, &v))| {
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v)],
                color(name).filled(),
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(names.iter().zip(values).enumerate().map(|(i, (_, &v))| {
            Text::new(
                format_value(v),
                (i as f64 + 0.2, v + top * 0.02),
                ("sans-serif", 12).into_font(),
            )
        }))
        .map_err(err)?;
    if let Some((v, label)) = limit {
        chart
            .draw_series(LineSeries::new(
                [(0.0, v), (n as f64, v)],
                RED.mix(0.7).stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series([Text::new(
                label.to_owned(),
                (0.05, v + top * 0.02),
                ("sans-serif", 12).into_font().color(&RED),
            )])
            .map_err(err)?;
    }
    Ok(())
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Contention: acquisitions per second, commands per acquisition, and waits.
pub fn contention(path: &Path, contention: &mut Contention) -> Result<(), BenchError> {
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (chart_area, legend_area) = root.split_vertically(470);
    let panels = chart_area.split_evenly((1, 3));
    let names: Vec<String> = contention
        .rows
        .iter()
        .map(|r| r.short_name.clone())
        .collect();
    let rates: Vec<f64> = contention.rows.iter().map(|r| r.rate()).collect();
    let commands: Vec<f64> = contention
        .rows
        .iter()
        .map(|r| r.stats.client_calls() as f64 / r.acquisitions.max(1) as f64)
        .collect();
    bars(
        &panels[0],
        "Acquisitions per second (16 tasks, 1 key)",
        "acquisitions/s",
        &names,
        &rates,
        None,
    )?;
    bars(
        &panels[1],
        "Commands sent per acquisition",
        "commands",
        &names,
        &commands,
        Some((3.0, "target ≤ 3")),
    )?;

    // Waits: p50, p99 and the longest, log scale.
    let waits: Vec<[f64; 3]> = contention
        .rows
        .iter_mut()
        .map(|r| {
            let longest = r.longest_wait();
            [
                us(r.waits.p50()) / 1000.0,
                us(r.waits.p99()) / 1000.0,
                us(longest) / 1000.0,
            ]
        })
        .collect();
    let n = names.len();
    let top = waits.iter().flatten().copied().fold(50.0, f64::max) * 2.0;
    let bottom = waits
        .iter()
        .flatten()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(1.0, f64::min)
        / 2.0;
    let mut chart = ChartBuilder::on(&panels[2])
        .caption("Wait for the lock: p50 / p99 / longest", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(20)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n as f64, (bottom..top).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("ms (log scale)")
        .draw()
        .map_err(err)?;
    for (k, shade) in [0.35, 0.65, 1.0].into_iter().enumerate() {
        chart
            .draw_series(names.iter().zip(&waits).enumerate().map(|(i, (name, w))| {
                let x0 = i as f64 + 0.1 + k as f64 * 0.27;
                Rectangle::new(
                    [(x0, bottom), (x0 + 0.25, w[k].max(bottom))],
                    color(name).mix(shade).filled(),
                )
            }))
            .map_err(err)?;
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, 50.0), (n as f64, 50.0)],
            RED.mix(0.7).stroke_width(1),
        ))
        .map_err(err)?;
    chart
        .draw_series([Text::new(
            "max wait target 50 ms".to_owned(),
            (0.05, 55.0),
            ("sans-serif", 12).into_font().color(&RED),
        )])
        .map_err(err)?;

    // A legend for the contenders, shared by the three panels.
    let step = 1200 / n.max(1) as i32;
    for (i, name) in names.iter().enumerate() {
        let x = 20 + i as i32 * step;
        legend_area
            .draw(&Rectangle::new(
                [(x, 15), (x + 14, 29)],
                color(name).filled(),
            ))
            .map_err(err)?;
        legend_area
            .draw(&Text::new(
                name.clone(),
                (x + 20, 15),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
