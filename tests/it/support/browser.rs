//! Headless Chromium for the console tests, driven over WebDriver: Debian's
//! `chromedriver` on a free port, and `fantoccini` speaking to it. One
//! browser serves a whole test run: a test takes it with `browser()` (the
//! tests take turns), and the last test to let go closes it. The session is
//! ended (which quits Chromium), `chromedriver` is killed, any Chromium
//! process still running on this run's profile is killed by pid, and the
//! profile folder is removed — also when a test fails.
//!
//! Every wait is a poll against `DEADLINE`; the methods are blocking
//! wrappers (a current-thread tokio runtime) so tests read like the others.

use super::{address_after, Proc, DEADLINE};
use fantoccini::{Client, ClientBuilder, Locator};
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// The flags Chromium needs here: root (no sandbox), no GPU, and no
/// background traffic (the machine's closed network refuses it, and a test
/// must see only the service's requests).
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
];

/// The laptop-sized window every test starts from.
pub const LAPTOP: (u32, u32) = (1280, 900);

static SHARED: Mutex<Option<Browser>> = Mutex::new(None);
/// Tests holding or waiting for the browser; the last one out closes it.
static USERS: AtomicUsize = AtomicUsize::new(0);

/// The shared browser, for one test at a time.
pub fn browser() -> BrowserGuard {
    USERS.fetch_add(1, Ordering::SeqCst);
    let mut guard = BrowserGuard {
        shared: SHARED.lock().unwrap_or_else(|p| p.into_inner()),
    };
    if guard.shared.is_none() {
        *guard.shared = Some(Browser::start());
    }
    guard.reset();
    guard
}

/// A test's turn with the browser.
pub struct BrowserGuard {
    shared: MutexGuard<'static, Option<Browser>>,
}

impl std::ops::Deref for BrowserGuard {
    type Target = Browser;
    fn deref(&self) -> &Browser {
        self.shared.as_ref().expect("the browser is started")
    }
}

impl Drop for BrowserGuard {
    fn drop(&mut self) {
        if USERS.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.shared.take();
        }
    }
}

/// Chromium under `chromedriver`, and the WebDriver session.
pub struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    /// `http://127.0.0.1:PORT` of chromedriver, for the log endpoint.
    driver_base: String,
    driver: Proc,
    profile: TempDir,
}

impl Browser {
    fn start() -> Browser {
        let (driver, line) = Proc::start(
            "chromedriver",
            "chromedriver",
            &["--port=0", "--log-level=WARNING"],
            "started successfully on port",
        );
        let port = address_after(&line, "on port ")
            .trim_end_matches('.')
            .to_string();
        let driver_base = format!("http://127.0.0.1:{port}");
        let profile = TempDir::new("idem-chromium").expect("a profile folder");
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={},{}", LAPTOP.0, LAPTOP.1));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = runtime
            .block_on(
                ClientBuilder::new(connector)
                    .capabilities(capabilities)
                    .connect(&driver_base),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "no WebDriver session ({e}); chromedriver said:\n{}",
                    driver.stderr()
                )
            });
        Browser {
            runtime,
            client: Some(client),
            driver_base,
            driver,
            profile,
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    fn run<T>(&self, future: impl Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }

    /// A blank page, the laptop size, and the console log drained: what a
    /// test starts from.
    fn reset(&self) {
        self.goto("about:blank");
        self.resize(LAPTOP.0, LAPTOP.1);
        self.console_log();
    }

    pub fn goto(&self, url: &str) {
        self.run(self.client().goto(url))
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    pub fn resize(&self, width: u32, height: u32) {
        self.run(self.client().set_window_size(width, height))
            .expect("resize the window");
    }

    pub fn reload(&self) {
        self.run(self.client().refresh()).expect("reload");
    }

    /// Run `script` (a function body; `arguments` are `args`) in the page.
    pub fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.run(self.client().execute(script, args))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The page's address.
    pub fn url(&self) -> String {
        self.run(self.client().current_url())
            .expect("the current URL")
            .to_string()
    }

    /// Wait until `css` matches an element whose text is not empty, and
    /// return that text.
    pub fn text(&self, css: &str) -> String {
        let mut last = None;
        self.wait(&format!("text of {css}"), || {
            last = self.text_now(css).filter(|t| !t.trim().is_empty());
            last.is_some()
        });
        last.unwrap_or_default()
    }

    /// Wait until the text of `css` is `expected` (a page may show "Loading…"
    /// or an older answer first); time out naming what it showed.
    pub fn wait_text(&self, css: &str, expected: &str) {
        self.wait(&format!("{css} to read {expected:?}"), || {
            self.text_now(css).as_deref() == Some(expected)
        });
    }

    /// Wait until the text of `css` contains `needle`.
    pub fn wait_text_containing(&self, css: &str, needle: &str) {
        self.wait(&format!("{css} to contain {needle:?}"), || {
            self.text_now(css).is_some_and(|t| t.contains(needle))
        });
    }

    /// The text of `css` now, if it matches.
    pub fn text_now(&self, css: &str) -> Option<String> {
        let found = self.eval(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        );
        found.as_str().map(str::to_string)
    }

    /// The text of every element `css` matches, in order.
    pub fn texts(&self, css: &str) -> Vec<String> {
        let found = self.eval(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent);",
            vec![json!(css)],
        );
        serde_json::from_value(found).expect("a list of texts")
    }

    /// An attribute of every element `css` matches.
    pub fn attributes(&self, css: &str, name: &str) -> Vec<String> {
        let found = self.eval(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.getAttribute(arguments[1]));",
            vec![json!(css), json!(name)],
        );
        serde_json::from_value(found).expect("a list of attributes")
    }

    /// How many elements match `css` now.
    pub fn count(&self, css: &str) -> usize {
        let found = self.eval(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        );
        found.as_u64().unwrap_or(0) as usize
    }

    /// Wait until `css` matches.
    pub fn wait_for(&self, css: &str) {
        self.wait(&format!("an element {css}"), || self.count(css) > 0);
    }

    /// Click the first element `css` matches, once it is there.
    pub fn click(&self, css: &str) {
        self.wait_for(css);
        let element = self
            .run(self.client().find(Locator::Css(css)))
            .unwrap_or_else(|e| panic!("find {css}: {e}"));
        self.run(element.click())
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Type `text` into the field `css`, after clearing it.
    pub fn type_into(&self, css: &str, text: &str) {
        self.wait_for(css);
        let element = self
            .run(self.client().find(Locator::Css(css)))
            .unwrap_or_else(|e| panic!("find {css}: {e}"));
        self.run(element.clear()).expect("clear the field");
        self.run(element.send_keys(text))
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Poll `check` until it holds, or fail naming `what` and the page.
    pub fn wait(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !check() {
            if Instant::now() >= deadline {
                let page = self.eval(
                    "return document.body ? document.body.innerText : ''",
                    vec![],
                );
                panic!(
                    "timed out waiting for {what} at {}; the page says:\n{}",
                    self.url(),
                    page.as_str().unwrap_or("")
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The browser's console since the last call: `(level, message)`.
    pub fn console_log(&self) -> Vec<(String, String)> {
        let session = self
            .run(self.client().session_id())
            .expect("a session id")
            .expect("a session");
        let response = idempotent_tool::client::request_once(
            &self.driver_base,
            "POST",
            &format!("/session/{session}/se/log"),
            &[("Content-Type", "application/json")],
            Some(br#"{"type":"browser"}"#),
            Some(DEADLINE),
        )
        .expect("chromedriver's log");
        let entries = response.json()["value"].as_array().cloned();
        entries
            .unwrap_or_default()
            .iter()
            .map(|e| {
                let field = |name: &str| e[name].as_str().unwrap_or("").to_string();
                (field("level"), field("message"))
            })
            .collect()
    }

    /// Console entries at level `SEVERE` (errors, CSP refusals, failed loads).
    pub fn console_errors(&self) -> Vec<String> {
        self.console_log()
            .into_iter()
            .filter(|(level, _)| level == "SEVERE")
            .map(|(_, message)| message)
            .collect()
    }

    /// Every resource the page loaded (`performance` entries), by URL.
    pub fn resources(&self) -> Vec<String> {
        let found = self.eval(
            "return performance.getEntriesByType('resource').map(e => e.name);",
            vec![],
        );
        serde_json::from_value(found).expect("a list of URLs")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Ending the session quits Chromium; bounded, in case it hangs.
            let _ = self.runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(20), client.close()).await
            });
        }
        self.driver.kill();
        kill_leftovers(&self.profile.path().display().to_string());
    }
}

/// Kill, by pid, any process still running with this run's profile (its own
/// temp folder, so nothing else can match).
fn kill_leftovers(profile: &str) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let needle = format!("--user-data-dir={profile}");
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let ours = cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == needle.as_bytes());
        if ours {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}
