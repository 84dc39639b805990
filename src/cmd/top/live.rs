//! The live view: a ratatui screen redrawn from the latest scrape, a background task that
//! scrapes every interval, and the keys of [`super::keys`]. The terminal is put back (raw
//! mode off, the normal screen back) on every way out: `q`, Ctrl-C, SIGTERM or SIGHUP, an
//! error (the guard's `Drop`), and a panic (the hook `ratatui::try_init` installs).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Row as TableRow, Table};
use tokio::sync::watch;

use super::keys::{Controls, Key};
use super::render::{cells, clean, HEADERS};
use super::rows::{rows, Row, Scrape};
use super::source::{self, Target};
use super::state::SinkState;
use super::view;
use crate::exit;
use crate::shared::server_url::redacted;

/// What the screen shows: the latest rows and what could not be read.
#[derive(Debug, Clone, Default)]
struct Frame {
    rows: Vec<Row>,
    ready: Option<bool>,
    notes: Vec<String>,
    /// The last scrape's failure, while the rows are those of the one before.
    error: Option<String>,
    /// When the rows were read (UTC, `HH:MM:SS`).
    at: String,
}

/// Puts the terminal back when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Runs the live view until a quit key or signal.
pub async fn run(t: Target, controls: Controls) -> Result<(), (u8, String)> {
    if !std::io::stdout().is_terminal() {
        return Err((
            exit::USAGE,
            "the live view needs a terminal on stdout; for scripts and pipes use --once (with --format json)".into(),
        ));
    }
    // The first scrape before the screen: an endpoint that does not answer is an error
    // message and exit 69, not a flash of an empty screen.
    let mut notes = Vec::new();
    let (first, at) = source::scrape(&t.metrics_url, &t.readyz_url, t.server.as_ref(), &mut notes)
        .await
        .map_err(|e| (e.exit_code(), e.to_string()))?;
    let initial = frame(rows(&first, None, &t.configured), &first, notes);
    let (tx, rx) = watch::channel(initial);
    let quit = Arc::new(AtomicBool::new(false));
    let url = redacted(&t.metrics_url);
    let refresher = tokio::spawn(refresh(t, first, at, tx));
    let signals = tokio::spawn(quit_on_signal(quit.clone()));
    let ui = tokio::task::spawn_blocking(move || draw_loop(rx, controls, &quit, &url)).await;
    refresher.abort();
    signals.abort();
    match ui {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err((exit::FAILURE, format!("the terminal failed: {e}"))),
        Err(e) => Err((exit::FAILURE, format!("the live view stopped: {e}"))),
    }
}

/// The frame of one scrape's rows.
fn frame(rows: Vec<Row>, scrape: &Scrape, notes: Vec<String>) -> Frame {
    let now = time::OffsetDateTime::now_utc();
    Frame {
        rows,
        ready: scrape.ready.as_ref().map(|r| r.ok),
        notes,
        error: None,
        at: format!("{:02}:{:02}:{:02}", now.hour(), now.minute(), now.second()),
    }
}

/// Scrapes every interval and publishes the rows, the rates against the scrape before.
async fn refresh(t: Target, mut before: Scrape, mut before_at: Instant, tx: watch::Sender<Frame>) {
    loop {
        tokio::time::sleep(t.interval).await;
        let mut notes = Vec::new();
        match source::scrape(&t.metrics_url, &t.readyz_url, t.server.as_ref(), &mut notes).await {
            Ok((now, at)) => {
                let seconds = at.duration_since(before_at).as_secs_f64();
                let rows = rows(&now, Some((&before, seconds)), &t.configured);
                tx.send_replace(frame(rows, &now, notes));
                (before, before_at) = (now, at);
            }
            Err(e) => tx.send_modify(|f| f.error = Some(e.to_string())),
        }
    }
}

/// Sets `quit` on SIGTERM or SIGHUP (the SSH session went), so the screen is put back.
async fn quit_on_signal(quit: Arc<AtomicBool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
    quit.store(true, Ordering::Release);
}

/// Draws until a key or signal says to quit.
fn draw_loop(
    rx: watch::Receiver<Frame>,
    mut controls: Controls,
    quit: &AtomicBool,
    url: &str,
) -> std::io::Result<()> {
    let _restore = Restore;
    let mut terminal = ratatui::try_init()?;
    while !controls.quit && !quit.load(Ordering::Acquire) {
        let shown = rx.borrow().clone();
        terminal.draw(|f| draw(f, &shown, &controls, url))?;
        if event::poll(Duration::from_millis(200))? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Release {
                    if let Some(key) = key_of(k.code, k.modifiers) {
                        controls.press(key);
                    }
                }
            }
        }
    }
    Ok(())
}

/// The view's key for a terminal key.
fn key_of(code: KeyCode, modifiers: KeyModifiers) -> Option<Key> {
    Some(match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Key::CtrlC,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

fn state_style(state: SinkState) -> Style {
    let color = match state {
        SinkState::Running => Color::Green,
        SinkState::Paused | SinkState::Waiting => Color::Yellow,
        SinkState::Holding | SinkState::NotBound => Color::Red,
        SinkState::Unknown => Color::Gray,
    };
    Style::default().fg(color)
}

/// One screen: a status line, the table, the sinks' last errors and the notes, the keys.
fn draw(f: &mut ratatui::Frame, shown: &Frame, c: &Controls, url: &str) {
    let rows = view::arrange(&shown.rows, c.sort, c.shown_filter());
    let mut messages: Vec<Line> = Vec::new();
    if let Some(e) = &shown.error {
        messages.push(Line::styled(clean(e), Style::default().fg(Color::Red)));
    }
    for r in rows.iter().filter(|r| r.last_error.is_some()) {
        let text = format!(
            "{}: {}",
            clean(&r.sink),
            clean(r.last_error.as_deref().unwrap_or(""))
        );
        messages.push(Line::styled(text, state_style(r.state)));
    }
    for n in &shown.notes {
        messages.push(Line::styled(clean(n), Style::default().fg(Color::Yellow)));
    }
    let message_height = u16::try_from(messages.len().min(6)).unwrap_or(6);
    let [status, table, below, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(2),
        Constraint::Length(message_height),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let ready = match shown.ready {
        Some(true) => "ready",
        Some(false) => "NOT READY",
        None => "readiness unknown",
    };
    let title = format!(
        "jetsink top  {}  {ready}  {}  sort: {}  filter: {}",
        clean(url),
        shown.at,
        c.sort.as_str(),
        if c.shown_filter().is_empty() {
            "-"
        } else {
            c.shown_filter()
        }
    );
    f.render_widget(
        Paragraph::new(clean(&title)).style(Style::default().add_modifier(Modifier::BOLD)),
        status,
    );
    f.render_widget(sink_table(&rows), table);
    f.render_widget(Paragraph::new(messages), below);
    let keys = match &c.editing {
        Some(text) => format!("filter: {}_   Enter apply   Esc cancel", clean(text)),
        None => "q quit   s sort   / filter   Esc clear the filter".to_string(),
    };
    f.render_widget(
        Paragraph::new(keys).style(Style::default().add_modifier(Modifier::REVERSED)),
        help,
    );
}

/// The sinks as a table, each column as wide as its widest cell.
fn sink_table(rows: &[Row]) -> Table<'static> {
    let body: Vec<[String; 12]> = rows.iter().map(cells).collect();
    let widths = (0..HEADERS.len()).map(|i| {
        let widest = body
            .iter()
            .map(|r| r[i].chars().count())
            .chain([HEADERS[i].len()])
            .max();
        Constraint::Length(u16::try_from(widest.unwrap_or(1)).unwrap_or(u16::MAX))
    });
    let lines = rows.iter().zip(body.clone()).map(|(r, cells)| {
        let mut cells: Vec<ratatui::widgets::Cell> = cells.into_iter().map(Into::into).collect();
        cells[1] = cells[1].clone().style(state_style(r.state));
        TableRow::new(cells)
    });
    Table::new(lines.collect::<Vec<_>>(), widths.collect::<Vec<_>>())
        .header(TableRow::new(HEADERS).style(Style::default().add_modifier(Modifier::BOLD)))
        .column_spacing(2)
}
