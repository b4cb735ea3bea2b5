// A small canvas line chart (no dependencies). The server already downsampled the series to at most a
// few thousand points, so drawing stays fast and readable however long the run is.
"use strict";

const CohortChart = (() => {
  const PAD = { left: 56, right: 12, top: 10, bottom: 26 };

  function niceTicks(min, max, count) {
    if (!(isFinite(min) && isFinite(max))) return [];
    if (min === max) { const d = Math.abs(min) * 0.1 || 1; min -= d; max += d; }
    const raw = (max - min) / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) out.push(v);
    return out;
  }

  function fmt(v) {
    const a = Math.abs(v);
    const short = (x) => String(Number(x.toPrecision(4)));
    if (a >= 1e9) return short(v / 1e9) + "G";
    if (a >= 1e6) return short(v / 1e6) + "M";
    if (a >= 1e3) return short(v / 1e3) + "k";
    if (a > 0 && a < 0.01) return v.toExponential(1);
    return String(Math.round(v * 1000) / 1000);
  }

  // series: [{label, color, points: [[x, y], ...], band: [[x, lo, hi], ...] (optional)}]
  function draw(canvas, series) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const pts = series.flatMap((s) => s.points.filter((p) => p[1] !== null && isFinite(p[1])));
    canvas.dataset.points = String(series.length ? series[0].points.length : 0);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7385";
    if (!pts.length) { ctx.fillText("no data yet", w / 2 - 30, h / 2); return; }
    let xmin = Math.min(...pts.map((p) => p[0])), xmax = Math.max(...pts.map((p) => p[0]));
    let ymin = Math.min(...pts.map((p) => p[1])), ymax = Math.max(...pts.map((p) => p[1]));
    for (const s of series) for (const b of s.band || []) {
      if (b[1] !== null) ymin = Math.min(ymin, b[1]);
      if (b[2] !== null) ymax = Math.max(ymax, b[2]);
    }
    if (xmin === xmax) { xmin -= 1; xmax += 1; }
    const yt = niceTicks(ymin, ymax, 4);
    if (yt.length) { ymin = Math.min(ymin, yt[0]); ymax = Math.max(ymax, yt[yt.length - 1]); }
    if (ymin === ymax) { ymin -= 1; ymax += 1; }
    const X = (x) => PAD.left + (x - xmin) / (xmax - xmin) * (w - PAD.left - PAD.right);
    const Y = (y) => h - PAD.bottom - (y - ymin) / (ymax - ymin) * (h - PAD.top - PAD.bottom);
    ctx.strokeStyle = "#e3e6ec"; ctx.lineWidth = 1;
    for (const t of yt) {
      ctx.beginPath(); ctx.moveTo(PAD.left, Y(t)); ctx.lineTo(w - PAD.right, Y(t)); ctx.stroke();
      ctx.fillText(fmt(t), 4, Y(t) + 4);
    }
    for (const t of niceTicks(xmin, xmax, 5)) {
      if (t < xmin || t > xmax) continue;
      ctx.fillText(fmt(t), X(t) - 8, h - 8);
    }
    for (const s of series) {
      if (s.band && s.band.length > 1) {
        ctx.fillStyle = s.color + "33";
        ctx.beginPath();
        s.band.forEach((b, i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, X(b[0]), Y(b[2])));
        for (let i = s.band.length - 1; i >= 0; i--) ctx.lineTo(X(s.band[i][0]), Y(s.band[i][1]));
        ctx.closePath(); ctx.fill();
      }
      ctx.strokeStyle = s.color; ctx.lineWidth = 1.6; ctx.beginPath();
      let pen = false;
      for (const [x, y] of s.points) {
        if (y === null || !isFinite(y)) { pen = false; continue; }
        if (pen) ctx.lineTo(X(x), Y(y)); else ctx.moveTo(X(x), Y(y));
        pen = true;
      }
      ctx.stroke();
      if (s.points.length < 60) {
        ctx.fillStyle = s.color;
        for (const [x, y] of s.points) if (y !== null) { ctx.beginPath(); ctx.arc(X(x), Y(y), 2.5, 0, 7); ctx.fill(); }
      }
    }
    let lx = PAD.left + 6;
    for (const s of series) {
      if (!s.label) continue;
      ctx.fillStyle = s.color; ctx.fillRect(lx, PAD.top, 10, 3);
      ctx.fillStyle = "#1d2330"; ctx.fillText(s.label, lx + 14, PAD.top + 5);
      lx += ctx.measureText(s.label).width + 30;
    }
  }

  return { draw };
})();
