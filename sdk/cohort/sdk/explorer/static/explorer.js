// The explorer's pages. Everything shown comes from the JSON API and is put into the DOM as text
// (textContent), never as HTML: run names, descriptions and repo strings are written by strangers.
"use strict";

const $ = (id) => document.getElementById(id);

function safeHref(url) {
  if (typeof url !== "string") return null;
  try {
    const u = new URL(url);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
  } catch (e) { return null; }
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "href") {
      const href = safeHref(v) || (typeof v === "string" && /^\/[^/\\]/.test(v) ? v : null);
      if (href) node.setAttribute("href", href);
    } else if (k === "class" || k === "title" || k.startsWith("data-")) node.setAttribute(k, String(v));
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c === null || c === undefined ? "" : String(c)));
  return node;
}

function extLink(url, text) {
  const href = safeHref(url);
  if (!href) return document.createTextNode(text);
  const a = el("a", { href }, text);
  a.rel = "noopener noreferrer"; a.target = "_blank";
  return a;
}

const short = (s, n = 6) => (typeof s === "string" && s.length > 2 * n + 1 ? s.slice(0, n) + "…" + s.slice(-n) : s);
const num = (v, d = 4) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
function ago(t) {
  if (!t) return "–";
  const s = Math.max(0, Math.round(Date.now() / 1000 - t));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return new Date(t * 1000).toISOString().slice(0, 16).replace("T", " ");
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json();
  if (!r.ok) { const e = new Error(body.error || r.statusText); e.status = r.status; throw e; }
  return body;
}

function showIndexer(status) {
  const node = $("indexer");
  if (!node || !status) return;
  if (status.rpc_ok) {
    node.className = "indexer";
    node.textContent = (status.live ? "live" : "polling") + " · " + status.rpc_url;
  } else {
    node.className = "indexer down";
    node.textContent = "RPC unreachable: " + (status.error || "?") + (status.retry_in ? " (retrying in " + status.retry_in + " s)" : "");
  }
}

function replaceRows(tbody, rows) { tbody.replaceChildren(...rows); }

// -- live updates: the server says which runs changed; the page re-reads what it shows ---------------
function live(onChange) {
  let timer = null;
  const source = new EventSource("/api/stream");
  source.addEventListener("change", (ev) => {
    let runs = [];
    try { runs = JSON.parse(ev.data).runs || []; } catch (e) { /* a keepalive or junk: refresh anyway */ }
    clearTimeout(timer);
    timer = setTimeout(() => onChange(runs), 150);
  });
  return source;
}

// -- runs list --------------------------------------------------------------------------------------
const runsPage = { rows: [], key: "name", dir: 1 };

function renderRuns() {
  const { key, dir } = runsPage;
  const rows = [...runsPage.rows].sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * dir;
  });
  replaceRows(document.querySelector("#runs tbody"), rows.map((r) => {
    const bar = el("div", { class: "bar" }, el("div"));
    bar.firstChild.style.width = Math.min(100, 100 * r.step / Math.max(1, r.total_steps)) + "%";
    const phase = r.phase + (r.pending_pause ? " (pause pending)" : "");
    return el("tr", { "data-run": r.address },
      el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(r.address) }, r.name || r.run_id), el("div", { class: "muted mono" }, r.run_id)),
      el("td", {}, el("span", { class: "phase " + (r.halted ? "halted " : "") + r.phase }, phase)),
      el("td", {}, r.epoch),
      el("td", {}, r.step + " / " + r.total_steps, bar),
      el("td", {}, r.clients + (r.pending_joins ? " (+" + r.pending_joins + " joining)" : "")),
      el("td", {}, num(r.latest_loss)),
      el("td", {}, ago(r.last_activity)));
  }));
  $("empty").hidden = rows.length > 0;
  document.querySelectorAll("#runs th").forEach((th) => {
    th.classList.toggle("asc", th.dataset.key === key && dir > 0);
    th.classList.toggle("desc", th.dataset.key === key && dir < 0);
  });
}

async function loadRuns() {
  const body = await getJSON("/api/runs");
  runsPage.rows = body.runs;
  showIndexer(body.indexer);
  renderRuns();
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

function initRuns() {
  document.querySelectorAll("#runs th").forEach((th) => th.addEventListener("click", () => {
    runsPage.dir = runsPage.key === th.dataset.key ? -runsPage.dir : 1;
    runsPage.key = th.dataset.key;
    renderRuns();
  }));
  loadRuns().catch((e) => showIndexer({ rpc_ok: false, error: e.message }));
  live(() => loadRuns().catch(() => {}));
}

// -- run page ---------------------------------------------------------------------------------------
const runPage = { key: null, address: null, left: null, fetchedAt: 0 };

function renderTimeline(timeline) {
  $("timeline").replaceChildren(...timeline.map((epoch) => {
    const phases = epoch.phases;
    const segs = phases.map((p, i) => {
      const next = phases[i + 1];
      const span = next ? Math.max(1, next.at - p.at) : 1;
      const seg = el("div", { class: "seg " + p.phase, title: p.phase + " · step " + p.step + " · " + new Date(p.at * 1000).toISOString() });
      seg.style.flexGrow = String(span);
      return seg;
    });
    return el("div", { class: "epoch" }, el("span", { class: "epoch-label" }, "epoch " + epoch.epoch), el("div", { class: "segments" }, ...segs));
  }));
}

function renderRun(body) {
  const s = body.state;
  document.title = (s.name || body.run_id) + " · cohort explorer";
  $("name").textContent = s.name || body.run_id;
  $("run-id").textContent = body.run_id + " · " + body.address;
  const account = $("account-link");
  const href = safeHref(body.links.account);
  if (href) account.setAttribute("href", href); else account.removeAttribute("href");
  const phase = $("phase");
  phase.textContent = s.phase + (s.pending_pause ? " (pause pending)" : "");
  phase.className = "phase " + (s.halted || body.closed ? "halted " : "") + s.phase;
  runPage.left = s.phase_seconds_left; runPage.fetchedAt = Date.now() / 1000;
  tickTimeLeft();
  $("epoch").textContent = s.epoch;
  $("step").textContent = s.step + " / " + s.total_steps;
  $("progress").style.width = Math.min(100, 100 * s.step / Math.max(1, s.total_steps)) + "%";
  $("witness-count").textContent = s.witnesses.submitted + " of " + s.witnesses.needed + " seats (majority " + s.witnesses.quorum + ")" + (s.witnesses.decided ? ", decided" : "");
  $("description").textContent = s.description || "";
  renderTimeline(body.timeline);

  replaceRows(document.querySelector("#clients tbody"), s.clients.map((c) => el("tr", { "data-wallet": c.wallet },
    el("td", {}, c.index),
    el("td", { class: "mono", title: c.wallet }, c.wallet),
    el("td", { class: "mono", title: c.p2p_identity }, short(c.p2p_identity, 8)),
    el("td", { class: "health-" + c.health }, c.health),
    el("td", {}, c.points),
    el("td", { class: "role-" + c.role }, c.role + (c.witnessed ? " ✓" : "")))));
  $("no-clients").hidden = s.clients.length > 0;

  replaceRows(document.querySelector("#rounds tbody"), body.recent_rounds.map((r) => {
    const losses = r.witnesses.map((w) => w.loss).filter((v) => v !== null);
    const mean = losses.length ? losses.reduce((a, b) => a + b, 0) / losses.length : null;
    return el("tr", {}, el("td", {}, r.step),
      el("td", { class: "mono" }, r.witnesses.map((w) => "#" + w.index + " " + short(w.signer)).join(", ")),
      el("td", {}, num(mean)));
  }));

  renderChecks(body.verification, s);
  renderRewards(body.rewards);

  const ck = s.checkpoint;
  const repo = body.links.checkpoint ? extLink(body.links.checkpoint, ck.repo) : document.createTextNode(ck.repo || "–");
  $("checkpoint").replaceChildren(
    el("dt", {}, "kind"), el("dd", {}, ck.kind),
    el("dt", {}, "repo"), el("dd", {}, repo),
    el("dt", {}, "revision"), el("dd", {}, ck.revision || "–"),
    el("dt", {}, "step"), el("dd", {}, ck.step),
    el("dt", {}, "sha256"), el("dd", { class: "mono" }, /^0+$/.test(ck.sha256) ? "(not set)" : ck.sha256));
  const data = body.links.data_location ? extLink(body.links.data_location, s.model.data_location) : null;
  $("config").textContent = JSON.stringify({ config: s.config, model: s.model, client_version: s.client_version }, null, 2);
  if (data) $("config").append("\n\ndata: ", data);

  replaceRows(document.querySelector("#transactions tbody"), body.transactions.map((t) => el("tr", { class: t.err ? "failed" : "" },
    el("td", { class: "mono" }, extLink(t.explorer_url, short(t.signature, 10))),
    el("td", {}, t.slot),
    el("td", {}, ago(t.block_time)),
    el("td", {}, t.instructions.join(", ")),
    el("td", {}, t.err ? "failed: " + t.err : "ok"))));
  showIndexer(body.indexer);
}

// what the chain holds now about a member of this epoch (the state's verification), as one line
function checksNow(m) {
  if (!m) return "";
  const parts = m.failed_checks.filter((c) => !c.disputed).map((c) => "check s" + c.step + " " + c.reports + "/" + c.verifiers + " failed");
  for (const d of m.disputes)
    parts.push("dispute s" + d.step + " " + d.fails + " fail " + d.passes + " pass " + (d.committee === null ? "(committee not drawn yet)" : "of " + d.committee));
  if (m.convicted) parts.push("convicted");
  if (m.banned_until) parts.push("banned until epoch " + m.banned_until);
  return parts.join("; ");
}

// each member's history from the stored events (body.verification), and the open picture beside it
function renderChecks(history, s) {
  const v = s.verification;
  const now = {};
  for (const m of (v && v.members) || []) now[m.index] = m;
  const members = (history && history.members) || [];
  const open = v && (v.open_checks || v.open_disputes || v.banned.length);
  $("checks").hidden = !members.length && !open;
  if ($("checks").hidden) return;
  const counts = history ? history.checks_failed + " failed check reports, " + history.disputes_opened + " disputes opened, " + history.convictions + " convictions" : "";
  $("checks-summary").textContent = counts + (v ? " · open now: " + v.open_checks + "/" + v.check_slots + " check tallies, " + v.open_disputes + "/" + v.max_disputes + " disputes" : "");
  replaceRows(document.querySelector("#check-members tbody"), members.map((m) => el("tr", { "data-wallet": m.wallet, "data-epoch": m.epoch, "data-index": m.index },
    el("td", {}, m.epoch),
    el("td", {}, m.index),
    el("td", { class: "mono", title: m.wallet || "" }, m.wallet ? short(m.wallet, 8) : "–"),
    el("td", { class: "now" }, m.epoch === s.epoch ? checksNow(now[m.index]) : ""),
    el("td", { class: "failed-checks" }, m.failed_checks.map((c) => "s" + c.step + " " + c.reason + " by " + short(c.verifier) + " (" + c.reports + ")").join(", ")),
    el("td", { class: "disputes" }, m.disputes.map((d) => "s" + d.step + " " + (d.outcome || "open") + " (" + d.fails + " fail, " + d.passes + " pass" + (d.committee ? " of " + d.committee : "") + ")").join(", ")),
    el("td", { class: "convictions" }, m.convictions.map((c) => c.reason + " at s" + c.step + (c.forfeited ? " (forfeited " + c.forfeited + " points)" : "")).join(", ")))));
}

// base units as the mint's tokens (BigInt: u64 amounts may exceed a double's exact range)
function tokens(units, decimals) {
  const n = BigInt(units), scale = 10n ** BigInt(decimals);
  const part = (n % scale).toString().padStart(decimals, "0").replace(/0+$/, "");
  return (n / scale).toString() + (part ? "." + part : "");
}

function renderRewards(r) {
  $("rewards").hidden = !r;  // runs without a treasury show no rewards
  if (!r) return;
  const t = (v) => tokens(v, r.decimals);
  $("vault").replaceChildren(
    el("dt", {}, "vault"), el("dd", {}, t(r.vault_balance) + " of mint ", el("span", { class: "mono", title: r.mint }, r.mint)),
    el("dt", {}, "rate"), el("dd", {}, r.reward_per_point + " base units a settled point"),
    el("dt", {}, "funded / claimed"), el("dd", {}, t(r.funded) + " / " + t(r.claimed)),
    el("dt", {}, "stake to join"), el("dd", {}, r.stake_amount ? t(r.stake_amount) : "none"),
    el("dt", {}, "slashed"), el("dd", {}, t(r.slashed)));
  replaceRows(document.querySelector("#reward-members tbody"), r.members.map((m) => el("tr", { "data-wallet": m.wallet },
    el("td", { class: "mono", title: m.wallet }, m.wallet),
    el("td", {}, m.settled_points + (m.unsettled_points ? " (+" + m.unsettled_points + ")" : "")),
    el("td", {}, t(m.earned)), el("td", {}, t(m.claimed)), el("td", {}, t(m.claimable)),
    el("td", {}, m.stake_state ? t(m.staked) + " " + m.stake_state : "–"))));
}

function tickTimeLeft() {
  const node = $("time-left");
  if (runPage.left === null || runPage.left === undefined) { node.textContent = ""; return; }
  const left = Math.max(0, Math.round(runPage.left - (Date.now() / 1000 - runPage.fetchedAt)));
  node.textContent = left + " s left";
}

async function loadMetrics() {
  const m = await getJSON("/api/runs/" + encodeURIComponent(runPage.key) + "/metrics");
  const p = m.points;
  CohortChart.draw($("loss-chart"), [{ label: m.bucket > 1 ? "loss (mean of " + m.bucket + " steps)" : "loss", color: "#3867d6",
    points: p.map((q) => [q.step, q.loss]), band: p.map((q) => [q.step, q.loss_min, q.loss_max]) }]);
  CohortChart.draw($("tps-chart"), [{ label: "tokens/s", color: "#16a085", points: p.map((q) => [q.step, q.tokens_per_sec]) }]);
  CohortChart.draw($("bw-chart"), [
    { label: "sent", color: "#d68910", points: p.map((q) => [q.step, q.bytes_sent]) },
    { label: "received", color: "#8e44ad", points: p.map((q) => [q.step, q.bytes_received]) }]);
}

async function loadRun() {
  try {
    const body = await getJSON("/api/runs/" + encodeURIComponent(runPage.key));
    runPage.address = body.address;
    $("missing").hidden = true;
    renderRun(body);
    await loadMetrics();
  } catch (e) {
    $("missing").hidden = false;
    $("missing").textContent = e.status === 404 ? "No such run is indexed: " + runPage.key : "Cannot load the run: " + e.message;
  }
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

function initRun() {
  runPage.key = decodeURIComponent(location.pathname.split("/").pop() || "");
  loadRun();
  setInterval(tickTimeLeft, 1000);
  live((runs) => { if (!runs.length || runs.includes(runPage.address)) loadRun(); });
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "runs") initRuns();
  else if (document.body.dataset.page === "run") initRun();
});
