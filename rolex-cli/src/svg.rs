//! Small SVG charts for `rolex compare`: line charts and grouped bar charts, written directly
//! (no fonts or plotting library needed; the text is SVG text the viewer renders).

use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    /// Error bars: each point's standard deviation (empty: none drawn).
    pub err: Vec<f64>,
}

impl Series {
    /// Whether `other` has the same points within half a percent (it would hide under this one).
    fn coincides(&self, other: &Series) -> bool {
        self.points.len() == other.points.len()
            && self.points.iter().zip(&other.points).all(|(a, b)| {
                a.0 == b.0 && (a.1 - b.1).abs() <= 0.005 * a.1.abs().max(b.1.abs()).max(1e-12)
            })
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An axis's labels in one unit, chosen from its largest value: `900k` and `1.2M` never share an
/// axis.
fn axis_label(v: f64, top: f64) -> String {
    let a = top.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A readable number for a value label.
pub(crate) fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The canvas, title, subtitle and axis titles; `extra` pixels below the plot's usual height
/// (for slanted category labels, which the x axis's title then goes below).
fn frame(out: &mut String, title: &str, subtitle: &str, x_label: &str, y_label: &str, extra: f64) {
    let height = HEIGHT + extra;
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>
{}<text x="{}" y="{}" text-anchor="middle">{}</text>
<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>
"##,
        (LEFT + WIDTH - RIGHT) / 2.0,
        escape(title),
        wrap(subtitle, 105)
            .iter()
            .enumerate()
            .map(|(i, line)| format!(
                "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\" text-anchor=\"middle\">{}</text>\n",
                (LEFT + WIDTH - RIGHT) / 2.0,
                35.0 + 11.0 * i as f64,
                escape(line)
            ))
            .collect::<String>(),
        (LEFT + WIDTH - RIGHT) / 2.0,
        height - 6.0,
        escape(x_label),
        (TOP + HEIGHT - BOTTOM) / 2.0,
        (TOP + HEIGHT - BOTTOM) / 2.0,
        escape(y_label)
    );
}

fn y_axis(out: &mut String, y_max: f64) -> impl Fn(f64) -> f64 + use<> {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y = move |v: f64| HEIGHT - BOTTOM - v / y_max * plot_h;
    for i in 0..=5 {
        let v = y_max * f64::from(i) / 5.0;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(v),
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            axis_label(v, y_max)
        );
    }
    y
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for step in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if step * magnitude >= v {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

/// `text` in lines of at most `width` characters, broken at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// The legend: a line and a name per series, series in groups of `group` of one colour each.
fn legend(out: &mut String, names: &[(String, bool)], group: usize) {
    let mut y = TOP + 10.0;
    for (i, (name, dashed)) in names.iter().enumerate() {
        let x = WIDTH - RIGHT + 14.0;
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="3"{}/>"#,
            x + 24.0,
            COLOURS[(i / group.max(1)) % COLOURS.len()],
            if *dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            },
        );
        // Long names on several lines, within the margin.
        for (k, line) in wrap(name, 22).iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}">{}</text>"#,
                x + 30.0,
                y + 4.0 + 14.0 * k as f64,
                escape(line)
            );
            if k > 0 {
                y += 14.0;
            }
        }
        y += 20.0;
    }
}

/// The x and y axes' lines.
fn axes(out: &mut String) {
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="black"/>"#,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT
    );
}

/// Series `s` as a line, its points placed by `x` and `y`.
fn polyline(
    out: &mut String,
    s: &Series,
    colour: &str,
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(f64) -> f64,
) {
    let points: Vec<String> = s
        .points
        .iter()
        .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
        .collect();
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2.5"{}/>"#,
        points.join(" "),
        if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        }
    );
}

/// An error bar at `cx` from `lo` to `hi` (SVG coordinates), its caps `half` wide each side.
fn error_bar(out: &mut String, cx: f64, lo: f64, hi: f64, half: f64, colour: &str) {
    let _ = writeln!(
        out,
        r#"<path d="M{cx:.1},{lo:.1}V{hi:.1}M{:.1},{lo:.1}H{:.1}M{:.1},{hi:.1}H{:.1}" stroke="{colour}" stroke-width="1.4" fill="none"/>"#,
        cx - half,
        cx + half,
        cx - half,
        cx + half
    );
}

/// A line chart; `log2_x` spaces the x axis by powers of two. The x axis spans the points and is
/// labelled at their x values.
pub fn line_chart(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log2_x: bool,
) -> String {
    lines(title, subtitle, x_label, y_label, series, log2_x, None)
}

/// A line chart over time: the x axis spans `ticks` (from 0, say) and the points, and is
/// labelled at `ticks` (regular steps), not at the points.
pub fn time_chart(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    ticks: &[f64],
) -> String {
    lines(
        title,
        subtitle,
        x_label,
        y_label,
        series,
        false,
        Some(ticks),
    )
}

fn lines(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log2_x: bool,
    explicit_ticks: Option<&[f64]>,
) -> String {
    let mut out = String::new();
    frame(&mut out, title, subtitle, x_label, y_label, 0.0);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(explicit_ticks.unwrap_or_default().iter().copied())
        .collect();
    let tx = |v: f64| if log2_x { v.max(1e-9).log2() } else { v };
    let (x_lo, x_hi) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(tx(v)), hi.max(tx(v)))
        });
    let x_span = if x_hi > x_lo { x_hi - x_lo } else { 1.0 };
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |v: f64| LEFT + (tx(v) - x_lo) / x_span * plot_w;
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|s| {
                s.points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.1 + s.err.get(i).copied().unwrap_or(0.0))
            })
            .fold(0.0, f64::max)
            * 1.05,
    );
    let y = y_axis(&mut out, y_max);
    // A series that coincides with an earlier one is not drawn; the earlier one's legend names
    // both: "ROLEX, uniform" and "ROLEX, zipfian" read "ROLEX, uniform and zipfian (one line)".
    let mut names: Vec<(String, bool)> = Vec::new();
    let mut hidden: Vec<Vec<&str>> = Vec::new();
    let mut drawn: Vec<usize> = Vec::new();
    for (i, s) in series.iter().enumerate() {
        match drawn.iter().position(|&d| series[d].coincides(s)) {
            Some(at) => {
                let first = &series[drawn[at]].name;
                let shared = match (first.rsplit_once(", "), s.name.rsplit_once(", ")) {
                    (Some((a, _)), Some((b, rest))) if a == b => rest,
                    _ => s.name.as_str(),
                };
                hidden[at].push(shared);
            }
            None => {
                drawn.push(i);
                names.push((s.name.clone(), s.dashed));
                hidden.push(Vec::new());
            }
        }
    }
    for ((name, _), under) in names.iter_mut().zip(&hidden) {
        if !under.is_empty() {
            *name = format!("{name} and {} (one line)", under.join(" and "));
        }
    }
    let mut ticks: Vec<f64> = explicit_ticks.map_or_else(|| xs.clone(), <[f64]>::to_vec);
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    // A label too close to the previous one drawn is left out (0 and 5 on a 0–100 axis).
    let mut last_drawn = f64::NEG_INFINITY;
    for t in ticks {
        if x(t) - last_drawn < 28.0 {
            continue;
        }
        last_drawn = x(t);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(t),
            HEIGHT - BOTTOM + 16.0,
            short(t)
        );
    }
    axes(&mut out);
    for (i, s) in drawn.iter().map(|&d| &series[d]).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        for (&(px, py), &e) in s.points.iter().zip(&s.err) {
            if e > 0.0 {
                error_bar(
                    &mut out,
                    x(px),
                    y((py - e).max(0.0)),
                    y(py + e),
                    4.0,
                    colour,
                );
            }
        }
        polyline(&mut out, s, colour, &x, &y);
        for &(px, py) in &s.points {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                x(px),
                y(py)
            );
        }
    }
    legend(&mut out, &names, 1);
    out.push_str("</svg>\n");
    out
}

/// Latency against percentile (or throughput): x positions given with their labels (the axis
/// spans them and the points), y on a log scale. Series come in groups of `group` of one colour
/// each (a quantile solid and another dashed, say).
pub fn latency_chart(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_ticks: &[(f64, String)],
    group: usize,
) -> String {
    let mut out = String::new();
    frame(&mut out, title, subtitle, x_label, y_label, 0.0);
    let values = || series.iter().flat_map(|s| s.points.iter());
    let (x_lo, x_hi) = values()
        .map(|p| p.0)
        .chain(x_ticks.iter().map(|t| t.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    let (x_lo, x_hi) = if x_hi > x_lo {
        (x_lo, x_hi)
    } else {
        (0.0, 1.0)
    };
    let positive = || values().map(|p| p.1).filter(|&v| v > 0.0);
    let lo_exp = positive().fold(f64::INFINITY, f64::min).log10().floor();
    let hi_exp = positive().fold(f64::NEG_INFINITY, f64::max).log10().ceil();
    let (lo_exp, hi_exp) = if lo_exp.is_finite() && hi_exp > lo_exp {
        (lo_exp, hi_exp)
    } else {
        (0.0, 1.0)
    };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |v: f64| LEFT + (v - x_lo) / (x_hi - x_lo) * plot_w;
    let y = |v: f64| {
        HEIGHT - BOTTOM - (v.max(10f64.powf(lo_exp)).log10() - lo_exp) / (hi_exp - lo_exp) * plot_h
    };
    let mut e = lo_exp;
    while e <= hi_exp {
        let v = 10f64.powf(e);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(v),
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            short(v)
        );
        e += 1.0;
    }
    for (t, label) in x_ticks {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(*t),
            HEIGHT - BOTTOM + 16.0,
            escape(label)
        );
    }
    axes(&mut out);
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[(i / group.max(1)) % COLOURS.len()];
        polyline(&mut out, s, colour, &x, &y);
        // A few measured points are marked; a spectrum of many is a line.
        for &(px, py) in s.points.iter().filter(|_| s.points.len() <= 20) {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"/>"#,
                x(px),
                y(py)
            );
        }
    }
    legend(
        &mut out,
        &series
            .iter()
            .map(|s| (s.name.clone(), s.dashed))
            .collect::<Vec<_>>(),
        group,
    );
    out.push_str("</svg>\n");
    out
}

/// A grouped bar chart: for each category, one bar per series (`values[series][category]`).
pub fn bar_chart(
    title: &str,
    subtitle: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    bar_chart_with_errors(
        title,
        subtitle,
        "operation",
        y_label,
        categories,
        series,
        &[],
    )
}

/// A grouped bar chart with error bars: `errors[series][category]` is a bar's standard deviation
/// (missing: none drawn).
pub fn bar_chart_with_errors(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    errors: &[Vec<f64>],
) -> String {
    let err = |i: usize, c: usize| errors.get(i).and_then(|e| e.get(c)).copied().unwrap_or(0.0);
    let plot_w = WIDTH - LEFT - RIGHT;
    let group = plot_w / categories.len().max(1) as f64;
    // Crowded categories: labels slanted, and no value printed over each bar.
    let longest = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let crowded = group < 70.0 || 6.5 * longest as f64 > group;
    // Slanted 30 degrees, a label of n characters (about 5.5 pixels each at size 10) reaches
    // n x 2.75 pixels below where it starts, 16 below the axis: the canvas grows so that it ends
    // above the x axis's title.
    let extra = if crowded {
        (16.0 + 2.75 * longest as f64 + 10.0 + 18.0 - BOTTOM).max(0.0)
    } else {
        0.0
    };
    let mut out = String::new();
    frame(&mut out, title, subtitle, x_label, y_label, extra);
    let y_max = nice_max(
        series
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.1.iter().enumerate().map(move |(c, &v)| (i, c, v)))
            .map(|(i, c, v)| v + err(i, c))
            .fold(0.0, f64::max)
            * 1.1,
    );
    let y = y_axis(&mut out, y_max);
    let bar = group * 0.8 / series.len().max(1) as f64;
    for (c, name) in categories.iter().enumerate() {
        let gx = LEFT + group * c as f64 + group * 0.1;
        let (lx, ly) = (gx + group * 0.4, HEIGHT - BOTTOM + 16.0);
        let _ = if crowded {
            writeln!(
                out,
                r#"<text x="{lx:.1}" y="{ly}" font-size="10" text-anchor="end" transform="rotate(-30 {lx:.1} {ly})">{}</text>"#,
                escape(name)
            )
        } else {
            writeln!(
                out,
                r#"<text x="{lx:.1}" y="{ly}" text-anchor="middle">{}</text>"#,
                escape(name)
            )
        };
        for (i, (_, values)) in series.iter().enumerate() {
            let v = values.get(c).copied().unwrap_or(0.0);
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                gx + bar * i as f64,
                y(v),
                bar * 0.95,
                (HEIGHT - BOTTOM - y(v)).max(0.0),
                COLOURS[i % COLOURS.len()],
            );
            if !crowded {
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"#,
                    gx + bar * i as f64 + bar * 0.475,
                    y(v + err(i, c)) - 3.0,
                    short(v)
                );
            }
            let e = err(i, c);
            if e > 0.0 {
                let cx = gx + bar * i as f64 + bar * 0.475;
                error_bar(&mut out, cx, y((v - e).max(0.0)), y(v + e), 3.0, "black");
            }
        }
    }
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/>"#,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT
    );
    legend(
        &mut out,
        &series
            .iter()
            .map(|s| (s.0.clone(), false))
            .collect::<Vec<_>>(),
        1,
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_svg_with_every_series() {
        let line = line_chart(
            "t <1>",
            "modeled",
            "x",
            "y",
            &[
                Series {
                    name: "rolex".into(),
                    points: vec![(1.0, 10.0), (2.0, 20.0), (64.0, 15.0)],
                    dashed: false,
                    err: vec![1.0, 0.0, 2.0],
                },
                Series {
                    name: "bplus".into(),
                    points: vec![(1.0, 5.0), (64.0, 30.0)],
                    dashed: true,
                    err: Vec::new(),
                },
            ],
            true,
        );
        assert!(line.starts_with("<svg") && line.trim_end().ends_with("</svg>"));
        assert_eq!(line.matches("<polyline").count(), 2);
        assert!(line.contains("t &lt;1&gt;") && line.contains(">bplus<"));
        let bars = bar_chart(
            "bytes",
            "measured",
            "bytes",
            &["get".into(), "insert".into()],
            &[
                ("rolex".into(), vec![1.0, 2.0]),
                ("bplus".into(), vec![3.0, 4.0]),
            ],
        );
        assert_eq!(bars.matches("<rect x=").count(), 4);
        // Error bars where a deviation is given.
        assert_eq!(line.matches("<path d=").count(), 2);
    }

    #[test]
    fn a_series_hidden_under_another_is_named_in_its_legend_and_axes_keep_one_unit() {
        let same = |name: &str| Series {
            name: name.into(),
            points: vec![(0.0, 900_000.0), (5.0, 1_200_000.0), (100.0, 1_000_000.0)],
            dashed: false,
            err: Vec::new(),
        };
        let chart = line_chart(
            "t",
            "s",
            "x",
            "y",
            &[same("uniform"), same("zipfian")],
            false,
        );
        assert_eq!(chart.matches("<polyline").count(), 1);
        // The legend's words, across the lines it wraps to.
        let legend: Vec<&str> = chart
            .split("<text ")
            .filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split_once('<')))
            .map(|(text, _)| text)
            .collect();
        assert!(
            legend.join(" ").contains("uniform and zipfian (one line)"),
            "{legend:?}"
        );
        // Labels of one axis in one unit: no "900k" beside "1.2M".
        assert!(!chart.contains(">900k<") && chart.contains("M<"));
        // The x labels 0 and 5 would overlap: only one is drawn.
        assert!(chart.contains(">0<") && !chart.contains(">5<"));
    }

    /// Slanted category labels end above the x axis's title, inside the canvas (they ran into
    /// it, and off the canvas, before).
    #[test]
    fn slanted_labels_leave_room_for_the_axis_title() {
        let categories: Vec<String> = [
            "GET (YCSB C)",
            "UPDATE (YCSB A)",
            "INSERT (100% inserts)",
            "SCAN (YCSB E)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let values = vec![1.0, 2.0, 3.0, 4.0];
        let chart = bar_chart("t", "s", "y", &categories, &[("a".into(), values)]);
        let number_after = |text: &str, key: &str| -> f64 {
            let at = text.find(key).expect(key) + key.len();
            text[at..]
                .split('"')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("a number")
        };
        let height = number_after(&chart, "height=\"");
        let title = chart
            .lines()
            .find(|l| l.ends_with(">operation</text>"))
            .expect("the x axis's title");
        let title_y = number_after(title, "y=\"");
        assert!(chart.contains("rotate(-30"), "crowded: slanted");
        // The longest label starts 16 below the axis and reaches 21 x 2.75 lower still.
        let lowest = HEIGHT - BOTTOM + 16.0 + 21.0 * 2.75;
        assert!(
            title_y > lowest + 10.0,
            "title at {title_y}, labels to {lowest}"
        );
        assert!(height > title_y && height > HEIGHT, "{height}");
    }
}
