/* revtree dashboard: one page, routed by the URL fragment. Plain JavaScript and SVG.
 *
 * Security: everything a model or a user wrote is put in the page with textContent /
 * createTextNode (the el() and sv() helpers below); the only innerHTML is the diff,
 * which the server renders with Pygments (escaped). */
"use strict";

(function () {
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const SVGNS = "http://www.w3.org/2000/svg";
  const app = document.getElementById("app");
  let INFO = { read_only: !TOKEN, version: "" };
  let page = null;

  // -- DOM helpers: text is always text ---------------------------------------------
  function put(node, kid) {
    if (kid == null || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach((k) => put(node, k)); return; }
    node.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === "text") node.textContent = String(v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
  }
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    put(node, kids);
    return node;
  }
  function sv(tag, attrs, ...kids) {
    const node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    put(node, kids);
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  // -- formatting ----------------------------------------------------------------------
  function fmtNum(v, digits) {
    if (v == null || Number.isNaN(v)) return "–";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    if (a < 1e-12) return "0";
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(Math.max(2, (digits || 4) - 2));
    return String(Number(v.toPrecision(digits || 4)));
  }
  // significant digits (4 at least, 15 at most) that write the different numbers of
  // ``values`` differently, with their closest two apart in their last digit or two:
  // best 1.2341 beside baseline 1.2345, not both "1.234" (nor 1.235 beside 1.234)
  function digitsApart(values) {
    const vs = [...new Set(values.filter((v) => typeof v === "number" && Number.isFinite(v)))].sort((a, b) => a - b);
    if (vs.length < 2) return 4;
    let gap = Infinity;
    for (let j = 1; j < vs.length; j++) gap = Math.min(gap, vs[j] - vs[j - 1]);
    const big = Math.max(...vs.map(Math.abs));
    let d = gap > 0 && big > 0 ? Math.floor(Math.log10(big)) - Math.floor(Math.log10(gap)) + 1 : 4;
    for (d = Math.max(4, Math.min(15, d)); d < 15; d++) {
      if (new Set(vs.map((v) => fmtNum(v, d))).size === vs.length) return d;
    }
    return 15;
  }
  // ticks at 1, 2 or 5 times a power of ten over [lo, hi] (Heckbert's nice numbers), each
  // with as many decimals as its step needs, so that no two labels are the same
  function niceStep(x, round) {
    const e = Math.floor(Math.log10(x)), f = x / Math.pow(10, e);
    const nf = round ? (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) : (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
    return nf * Math.pow(10, e);
  }
  function niceTicks(lo, hi, count) {
    if (!(hi > lo) || !Number.isFinite(hi - lo)) return [{ v: lo, label: fmtNum(lo) }];
    const step = niceStep(niceStep(hi - lo, false) / Math.max(1, (count || 5) - 1), true);
    const first = Math.ceil(lo / step - 1e-9), last = Math.floor(hi / step + 1e-9);
    const vs = [];
    for (let k = first; k <= last && vs.length < 50; k++) vs.push(k * step);
    const big = Math.max(...vs.map(Math.abs));
    const sci = big >= 1e6 || (big < 1e-3 && big > 0);
    let d = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const write = (v, extra) => {
      if (Math.abs(v) < step * 1e-6) return "0";
      if (!sci) return v.toFixed(d + extra);
      return v.toExponential(Math.max(0, Math.floor(Math.log10(big)) - Math.floor(Math.log10(step) + 1e-9)) + extra);
    };
    for (let extra = 0; extra < 6; extra++) {
      const labels = vs.map((v) => write(v, extra));
      if (new Set(labels).size === labels.length) return vs.map((v, j) => ({ v, label: labels[j] }));
    }
    return vs.map((v) => ({ v, label: String(v) }));
  }
  function fmtUsd(v) { return v == null ? "–" : "$" + (v < 1 ? v.toFixed(3) : v.toFixed(2)); }
  function fmtDur(s) {
    if (s == null) return "–";
    s = Number(s);
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }
  function fmtAge(ts) { return ts ? fmtDur(Math.max(0, Date.now() / 1000 - ts)) : "–"; }
  function fmtTime(ts) {
    if (!ts) return "";
    const d = new Date(ts * 1000);
    return d.toTimeString().slice(0, 8);
  }
  // a node's status in the words of a user (the stored ones name pipeline steps)
  const NODE_WORDS = { pending: "selected", proposed: "planned", coded: "code written", reviewed: "reviewed",
    evaluating: "evaluating", succeeded: "succeeded", failed: "failed", rejected: "rejected" };
  function nodeWord(status, waiting) { return waiting ? "waits for approval" : NODE_WORDS[status] || status || "?"; }
  function badge(status, extra) { return el("span", { class: "badge " + (status || "") }, extra || status || "?"); }
  function shortJson(v) {
    if (v == null) return "";
    if (typeof v === "string") return v;
    try { return JSON.stringify(v); } catch (e) { return String(v); }
  }

  // -- API -----------------------------------------------------------------------------
  async function api(path) {
    const r = await fetch(path, { headers: { Accept: "application/json" } });
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw new Error((body && body.error) || r.status + " " + r.statusText);
    return body;
  }
  async function post(path, payload) {
    const r = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Revtree-Token": TOKEN },
      body: JSON.stringify(payload || {}),
    });
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok || (body && body.ok === false)) throw new Error((body && body.error) || r.status + " " + r.statusText);
    return body || {};
  }
  let toastTimer = null;
  function toast(msg, isErr) {
    const t = document.getElementById("toast");
    t.textContent = msg;
    t.className = isErr ? "err" : "";
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, isErr ? 7000 : 3500);
  }
  function canAct() { return !!TOKEN && !INFO.read_only; }
  // a button that runs ``fn``: "label…" while it works, then its outcome ("✓ label" or
  // "✗ label", data-outcome ok/error; the message in a toast) for a few seconds
  function action(label, fn, cls) {
    let timer = null;
    return el("button", {
      class: cls || "",
      "data-action": label,
      onclick: async (ev) => {
        const b = ev.currentTarget;
        clearTimeout(timer);
        b.disabled = true;
        b.setAttribute("aria-busy", "true");
        b.dataset.outcome = "busy";
        b.textContent = label + "…";
        let ok = true;
        try { await fn(); } catch (e) { ok = false; toast(label + ": " + e.message, true); }
        b.removeAttribute("aria-busy");
        b.dataset.outcome = ok ? "ok" : "error";
        b.textContent = (ok ? "✓ " : "✗ ") + label;
        timer = setTimeout(() => { b.textContent = label; delete b.dataset.outcome; b.disabled = false; }, ok ? 2500 : 4000);
      },
    }, label);
  }

  // -- colour scale: rank of the score among successes, good = green ------------------
  const RAMP = [[215, 48, 39], [252, 141, 89], [254, 224, 139], [145, 207, 96], [26, 152, 80]];
  function rampColor(q) {
    q = Math.max(0, Math.min(1, q));
    const x = q * (RAMP.length - 1), i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
    const c = RAMP[i].map((a, j) => Math.round(a + (RAMP[i + 1][j] - a) * f));
    return "rgb(" + c.join(",") + ")";
  }
  function makeScale(scores, maximize) {
    const sorted = scores.filter((s) => s != null && Number.isFinite(s)).sort((a, b) => a - b);
    return function (s) {
      if (s == null || !Number.isFinite(s) || !sorted.length) return "#cbd5e1";
      if (sorted.length === 1) return rampColor(1);
      let lo = 0, hi = sorted.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (sorted[m] < s) lo = m + 1; else hi = m; }
      const q = lo / (sorted.length - 1);
      return rampColor(maximize ? q : 1 - q);
    };
  }
  const INFLIGHT = new Set(["pending", "proposed", "coded", "reviewed", "evaluating"]);

  // -- routing -------------------------------------------------------------------------
  function crumbs(items) {
    const c = clear(document.getElementById("crumbs"));
    items.forEach((it, i) => {
      if (i) put(c, el("span", {}, "/"));
      put(c, it.href ? el("a", { href: it.href }, it.text) : el("span", {}, it.text));
    });
  }
  function route() {
    const h = (location.hash || "#/").slice(1);
    // a malformed %-escape (a hand-edited or hostile link) is kept as it is, not thrown
    const decode = (x) => { try { return decodeURIComponent(x); } catch (e) { return x; } };
    const parts = h.split("/").filter(Boolean).map(decode);
    if (parts[0] === "run" && parts[1]) {
      const node = parts[2] === "node" && parts[3] != null ? Number(parts[3]) : null;
      if (page && page.kind === "run" && page.id === parts[1]) { page.showNode(node); return; }
      mount(new RunPage(parts[1], node));
    } else if (parts[0] === "compare" && parts[1]) {
      mount(new ComparePage(parts[1].split(",").filter(Boolean)));
    } else {
      mount(new RunsPage());
    }
  }
  function mount(p) {
    if (page) page.destroy();
    page = p;
    clear(app);
    p.mount().catch((e) => { clear(app); put(app, el("div", { class: "empty" }, "error: " + e.message)); });
  }

  // ======================================================================================
  // Runs page
  // ======================================================================================
  class RunsPage {
    constructor() { this.kind = "runs"; this.checked = new Set(); this.timer = null; }
    async mount() {
      crumbs([{ text: "runs" }]);
      document.title = "runs · revtree";
      this.cmp = el("button", { class: "primary", disabled: true, onclick: () => {
        location.hash = "#/compare/" + [...this.checked].map(encodeURIComponent).join(",");
      } }, "compare");
      this.count = el("span", { class: "muted" });
      this.body = el("tbody");
      put(app, el("div", { class: "toolbar" }, el("h2", {}, "Runs"), this.count, this.cmp));
      put(app, el("div", { class: "scrollx" }, el("table", { class: "grid", id: "runs" },
        el("thead", {}, el("tr", {},
          el("th", {}, ""), el("th", {}, "status"), el("th", {}, "run"), el("th", {}, "task"),
          el("th", {}, "policy"), el("th", { class: "num" }, "best"), el("th", { class: "num" }, "holdout"),
          el("th", { class: "num" }, "baseline"), el("th", { class: "num" }, "nodes"),
          el("th", { class: "num" }, "alarms"), el("th", { class: "num" }, "cost"),
          el("th", { class: "num" }, "age"))),
        this.body)));
      await this.load();
      this.timer = setInterval(() => this.load().catch(() => {}), 5000);
    }
    destroy() { clearInterval(this.timer); }
    async load() {
      const data = await api("/api/runs");
      const runs = data.runs || [];
      this.count.textContent = runs.length + " run" + (runs.length === 1 ? "" : "s");
      const ids = new Set(runs.map((r) => r.id));
      const kids = new Map();
      for (const r of runs) {
        if (r.parent_run && ids.has(r.parent_run)) {
          if (!kids.has(r.parent_run)) kids.set(r.parent_run, []);
          kids.get(r.parent_run).push(r);
        }
      }
      const order = [];
      const walk = (r, depth) => { order.push([r, depth]); (kids.get(r.id) || []).forEach((k) => walk(k, depth + 1)); };
      runs.filter((r) => !(r.parent_run && ids.has(r.parent_run))).forEach((r) => walk(r, 0));
      clear(this.body);
      if (!order.length) {
        put(this.body, el("tr", {}, el("td", { colspan: 12, class: "empty" }, "no runs in this store yet")));
      }
      for (const [r, depth] of order) {
        const dg = digitsApart([r.best_score, r.baseline_score, r.holdout_score]);
        const box = el("input", { type: "checkbox", "aria-label": "select " + r.id, onclick: (ev) => {
          ev.stopPropagation();
          if (ev.target.checked) this.checked.add(r.id); else this.checked.delete(r.id);
          this.cmp.disabled = this.checked.size < 2;
        } });
        box.checked = this.checked.has(r.id);
        const task = el("td", { class: "task", style: depth > 1 ? "padding-left:" + (8 + 18 * depth) + "px" : null }, r.task || "");
        if (r.parent_run) put(task, el("span", { class: "muted" }, " (fork of " + r.parent_run + (r.parent_node != null ? " @" + r.parent_node : "") + ")"));
        const tr = el("tr", { class: "clickable" + (depth ? " child" : ""), "data-run": r.id,
          onclick: () => { location.hash = "#/run/" + encodeURIComponent(r.id); } },
          el("td", {}, box),
          el("td", { title: r.reason || "" }, badge(r.status)),
          el("td", { class: "mono" }, el("a", { href: "#/run/" + encodeURIComponent(r.id) }, r.id)),
          task,
          el("td", {}, r.policy || ""),
          el("td", { class: "num" }, fmtNum(r.best_score, dg), r.best_node != null ? el("span", { class: "muted" }, " #" + r.best_node) : null),
          el("td", { class: "num" }, fmtNum(r.holdout_score, dg)),
          el("td", { class: "num" }, fmtNum(r.baseline_score, dg)),
          el("td", { class: "num" }, r.n_nodes ?? "–"),
          el("td", { class: "num" }, r.n_alarms ? badge("alarm", String(r.n_alarms)) : ""),
          el("td", { class: "num" }, fmtUsd(r.usd)),
          el("td", { class: "num", title: r.created_at ? new Date(r.created_at * 1000).toLocaleString() : "" }, fmtAge(r.created_at)));
        put(this.body, tr);
      }
      this.cmp.disabled = this.checked.size < 2;
    }
  }

  // ======================================================================================
  // Tree view: layered layout in JS, zoom / pan on a <g>, collapse, level of detail
  // ======================================================================================
  const DX = 30, DY = 50, R = 6;
  const DRAW_ALL = 2500;   // above this many visible nodes, only those in the viewport are drawn
  const AUTO_COLLAPSE = 2000; // above this many nodes, deep subtrees start collapsed

  class TreeView {
    constructor(svg, onPick) {
      this.svg = svg; this.onPick = onPick;
      this.view = sv("g", { class: "viewport" });
      this.edgePath = sv("path", { class: "edges" });
      this.linePath = sv("path", { class: "lineage" });
      this.crossPath = sv("path", { class: "cross" });
      this.nodeLayer = sv("g", { class: "nodes" });
      put(this.view, [this.edgePath, this.crossPath, this.linePath, this.nodeLayer]);
      put(svg, this.view);
      this.k = 1; this.tx = 20; this.ty = 20; this.userMoved = false; this.dy = DY;
      this.collapsed = new Set(); this.autoDone = false; this.selected = null; this.waiting = new Set();
      this.lodNote = null; this.raf = 0; this.drawnKey = "";
      this.bindEvents();
    }
    bindEvents() {
      const svg = this.svg;
      svg.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const rect = svg.getBoundingClientRect();
        const mx = ev.clientX - rect.left, my = ev.clientY - rect.top;
        const f = Math.exp(-ev.deltaY * (ev.deltaMode === 1 ? 0.05 : 0.0018));
        const k = Math.max(0.02, Math.min(6, this.k * f));
        this.tx = mx - (mx - this.tx) * (k / this.k);
        this.ty = my - (my - this.ty) * (k / this.k);
        this.k = k; this.userMoved = true;
        this.applyTransform();
      }, { passive: false });
      let drag = null;
      svg.addEventListener("pointerdown", (ev) => {
        if (ev.button !== 0) return;
        drag = { x: ev.clientX, y: ev.clientY, tx: this.tx, ty: this.ty, moved: false, id: ev.pointerId };
      });
      window.addEventListener("pointermove", (ev) => {
        if (!drag) return;
        const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
        if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
        if (!drag.moved) { drag.moved = true; svg.classList.add("dragging"); }
        this.tx = drag.tx + dx; this.ty = drag.ty + dy; this.userMoved = true;
        this.applyTransform();
      });
      window.addEventListener("pointerup", () => {
        if (drag && drag.moved) { this.suppressClick = true; setTimeout(() => { this.suppressClick = false; }, 0); }
        drag = null; svg.classList.remove("dragging");
      });
      svg.addEventListener("click", (ev) => {
        if (this.suppressClick) return;
        const t = ev.target.closest ? ev.target.closest(".toggle, .node") : null;
        if (!t) return;
        const id = Number(t.getAttribute("data-id"));
        if (t.classList.contains("toggle")) {
          if (this.collapsed.has(id)) this.collapsed.delete(id); else this.collapsed.add(id);
          this.layout(); this.draw(true);
        } else {
          this.onPick(id);
        }
      });
    }
    setData(cols, maximize) {
      const n = (cols.id || []).length;
      this.cols = cols; this.maximize = maximize; this.n = n;
      const index = new Map();
      for (let i = 0; i < n; i++) index.set(cols.id[i], i);
      const kids = Array.from({ length: n }, () => null);
      const roots = [];
      for (let i = 0; i < n; i++) {
        const p = cols.parent[i];
        const pi = p == null ? undefined : index.get(p);
        if (pi === undefined) roots.push(i);
        else (kids[pi] || (kids[pi] = [])).push(i);
      }
      this.index = index; this.kids = kids; this.roots = roots;
      // depth and subtree sizes (iterative: deep trees must not overflow the stack)
      const depth = new Int32Array(n), size = new Int32Array(n).fill(1), order = [];
      const stack = roots.slice();
      while (stack.length) {
        const i = stack.pop(); order.push(i);
        const ks = kids[i];
        if (ks) for (const k of ks) { depth[k] = depth[i] + 1; stack.push(k); }
      }
      for (let j = order.length - 1; j >= 0; j--) {
        const i = order[j], p = cols.parent[i], pi = p == null ? undefined : index.get(p);
        if (pi !== undefined) size[pi] += size[i];
      }
      this.depth = depth; this.size = size;
      this.lineage = new Set(cols.lineage || []);
      this.verified = cols.verified || [];
      this.alarm = cols.alarm || [];
      const ok = [];
      for (let i = 0; i < n; i++) if (cols.status[i] === "succeeded" && !this.alarm[i]) ok.push(cols.score[i]);
      this.color = makeScale(ok, maximize);
      if (!this.autoDone && n) {
        this.autoDone = true;
        if (n > AUTO_COLLAPSE) this.autoCollapse();
      }
      this.layout();
    }
    autoCollapse() {
      // the deepest level D with at most AUTO_COLLAPSE nodes at depth <= D stays open;
      // subtrees below D collapse, except along the best lineage
      const byDepth = [];
      for (let i = 0; i < this.n; i++) byDepth[this.depth[i]] = (byDepth[this.depth[i]] || 0) + 1;
      let D = 0, acc = 0;
      for (let d = 0; d < byDepth.length; d++) { acc += byDepth[d] || 0; if (acc > AUTO_COLLAPSE) break; D = d; }
      for (let i = 0; i < this.n; i++) {
        if (this.kids[i] && this.depth[i] >= D && !this.lineage.has(this.cols.id[i])) this.collapsed.add(this.cols.id[i]);
      }
    }
    layout() {
      const n = this.n, cols = this.cols;
      const xs = new Float64Array(n).fill(NaN), ys = new Float64Array(n).fill(NaN);
      let slot = 0; const vis = [];
      // iterative post-order: leaves take consecutive slots, a parent centres on its children
      for (const r of this.roots) {
        const stack = [[r, 0]];
        while (stack.length) {
          const top = stack[stack.length - 1];
          const i = top[0];
          const ks = this.collapsed.has(cols.id[i]) ? null : this.kids[i];
          if (top[1] === 0) { vis.push(i); ys[i] = this.depth[i] * this.dy; }
          if (ks && top[1] < ks.length) { stack.push([ks[top[1]], 0]); top[1]++; continue; }
          stack.pop();
          if (ks && ks.length) xs[i] = (xs[ks[0]] + xs[ks[ks.length - 1]]) / 2;
          else xs[i] = slot++ * DX;
        }
        slot += 1; // a gap between separate roots
      }
      this.xs = xs; this.ys = ys; this.vis = vis;
      let maxX = 0, maxY = 0;
      for (const i of vis) { if (xs[i] > maxX) maxX = xs[i]; if (ys[i] > maxY) maxY = ys[i]; }
      this.bounds = { w: maxX, h: maxY };
      // edges: one <path> for all, one for the best lineage
      const e = [], l = [];
      for (const i of vis) {
        const p = cols.parent[i], pi = p == null ? undefined : this.index.get(p);
        if (pi === undefined) continue;
        const x0 = xs[pi], y0 = ys[pi], x1 = xs[i], y1 = ys[i], my = (y0 + y1) / 2;
        const seg = "M" + x0.toFixed(1) + " " + (y0 + R) + "V" + my + "H" + x1.toFixed(1) + "V" + (y1 - R);
        if (this.lineage.has(cols.id[i]) && this.lineage.has(p)) l.push(seg); else e.push(seg);
      }
      this.edgePath.setAttribute("d", e.join(""));
      this.linePath.setAttribute("d", l.join(""));
      this.crossPath.setAttribute("d", this.crossEdges());
    }
    crossEdges() {
      // a crossover's other parents: a dashed curve from each (both ends shown) to it
      const xs = this.xs, ys = this.ys, out = [];
      for (const [id, ps] of Object.entries(this.cols.extra_parents || {})) {
        const i = this.index.get(Number(id));
        if (i === undefined || Number.isNaN(xs[i]) || !Array.isArray(ps)) continue;
        for (const p of ps) {
          const pi = this.index.get(p);
          if (pi === undefined || Number.isNaN(xs[pi])) continue;
          const x0 = xs[pi], y0 = ys[pi] + R, x1 = xs[i], y1 = ys[i] - R, bend = Math.max(20, Math.abs(x1 - x0) * 0.15);
          out.push("M" + x0.toFixed(1) + " " + y0.toFixed(1) + "C" + x0.toFixed(1) + " " + (y0 + bend).toFixed(1) + " " +
            x1.toFixed(1) + " " + (y1 - bend).toFixed(1) + " " + x1.toFixed(1) + " " + y1.toFixed(1));
        }
      }
      return out.join("");
    }
    fit() {
      const rect = this.svg.getBoundingClientRect();
      const W = rect.width || 800, H = rect.height || 500, pad = 28;
      // a wide, shallow tree gets taller levels, so that it uses the panel's height
      let levels = 0;
      for (const i of this.vis) if (this.depth[i] > levels) levels = this.depth[i];
      if (levels > 0) {
        const dy = Math.max(DY, Math.min(110, ((this.bounds.w + DX) * (H - 2 * pad)) / (W - 2 * pad) / levels));
        if (Math.abs(dy - this.dy) > 1) { this.dy = dy; this.layout(); }
      }
      const bw = this.bounds.w, bh = this.bounds.h;
      let k = Math.min((W - 2 * pad) / Math.max(bw, 1), (H - 2 * pad) / Math.max(bh, 1), 1.6);
      if (k < 0.25) {
        // too big to fit legibly: scale 0.8 on the best lineage's root
        k = 0.8;
        const root = this.roots.length ? this.roots[0] : 0;
        this.tx = W / 2 - (this.xs[root] || 0) * k; this.ty = pad;
      } else {
        this.tx = (W - bw * k) / 2; this.ty = pad + Math.max(0, (H - 2 * pad - bh * k) / 2) * 0.3;
      }
      this.k = k;
      this.applyTransform();
    }
    focus(id) {
      const i = this.index.get(id);
      if (i === undefined || Number.isNaN(this.xs[i])) return;
      const rect = this.svg.getBoundingClientRect();
      this.k = Math.max(this.k, 0.8);
      this.tx = rect.width / 2 - this.xs[i] * this.k; this.ty = rect.height / 2 - this.ys[i] * this.k;
      this.userMoved = true;
      this.applyTransform();
    }
    applyTransform() {
      this.view.setAttribute("transform", "translate(" + this.tx.toFixed(1) + "," + this.ty.toFixed(1) + ") scale(" + this.k.toFixed(4) + ")");
      this.svg.classList.toggle("far", this.k < 0.55);
      if (this.vis && this.vis.length > DRAW_ALL && !this.raf) {
        this.raf = requestAnimationFrame(() => { this.raf = 0; this.draw(false); });
      }
    }
    draw(force) {
      const cols = this.cols, xs = this.xs, ys = this.ys;
      let list = this.vis;
      const culled = list.length > DRAW_ALL;
      let key = "all";
      if (culled) {
        const rect = this.svg.getBoundingClientRect();
        const m = 60;
        const x0 = (-this.tx - m) / this.k, x1 = (rect.width - this.tx + m) / this.k;
        const y0 = (-this.ty - m) / this.k, y1 = (rect.height - this.ty + m) / this.k;
        list = list.filter((i) => xs[i] >= x0 && xs[i] <= x1 && ys[i] >= y0 && ys[i] <= y1);
        if (list.length > DRAW_ALL) list = list.slice(0, DRAW_ALL); // zoomed far out: the edges still show the shape
        key = x0.toFixed(0) + ":" + x1.toFixed(0) + ":" + y0.toFixed(0) + ":" + y1.toFixed(0) + ":" + list.length;
      }
      if (!force && key === this.drawnKey) return;
      this.drawnKey = key;
      const frag = document.createDocumentFragment();
      for (const i of list) frag.appendChild(this.nodeEl(i));
      clear(this.nodeLayer).appendChild(frag);
      if (this.lodNote) {
        const hidden = this.n - this.vis.length;
        this.lodNote.textContent = (hidden ? hidden + " nodes in collapsed subtrees · " : "") +
          (culled ? "drawing " + list.length + " of " + this.vis.length + " (viewport)" : this.n + " nodes");
      }
    }
    nodeEl(i) {
      const c = this.cols, id = c.id[i], st = c.status[i];
      let cls = "node " + st;
      if (this.waiting.has(id)) cls += " waiting";
      else if (INFLIGHT.has(st)) cls += " inflight";
      if (id === c.best) cls += " best";
      if (id === this.selected) cls += " sel";
      if (this.alarm[i]) cls += " alarmed";
      if (this.verified[i]) cls += " verified";
      const g = sv("g", { class: cls, transform: "translate(" + this.xs[i].toFixed(1) + "," + this.ys[i] + ")", "data-id": id });
      const r = id === c.best ? R + 2 : R;
      const fill = st === "succeeded" && !this.alarm[i] ? this.color(c.score[i]) : (st === "succeeded" ? "#fde68a" : "#e2e8f0");
      const title = "#" + id + " · " + nodeWord(st, this.waiting.has(id)) + (c.score[i] != null ? " · " + fmtNum(c.score[i]) : "") +
        (c.op && c.op[i] ? " · " + c.op[i] : "") + (this.alarm[i] ? " · ALARM" : "") +
        (this.verified[i] ? " · verified" : "") + (c.hypothesis && c.hypothesis[i] ? "\n" + c.hypothesis[i] : "");
      put(g, sv("title", {}, title));
      if (this.verified[i]) put(g, sv("circle", { class: "vring", r: r + 3 }));
      put(g, sv("circle", { class: "dot", r: r, fill: fill }));
      if (st === "failed") put(g, sv("path", { class: "xmark", d: "M-3 -3L3 3M3 -3L-3 3" }));
      if (this.waiting.has(id)) put(g, sv("path", { class: "hourglass", d: "M-2 -2.5h4l-4 5h4z" }));
      if (this.alarm[i]) put(g, sv("path", { class: "alarm", d: "M" + (r - 1) + " " + (-r - 5) + "l5 8h-10z" }));
      put(g, sv("text", { x: r + 3, y: 3 }, String(id)));
      const ks = this.kids[i];
      if (ks && ks.length) {
        const closed = this.collapsed.has(id);
        const t = sv("g", { class: "toggle", "data-id": id, transform: "translate(0," + (r + 6) + ")" },
          sv("title", {}, closed ? "expand (" + (this.size[i] - 1) + " below)" : "collapse"),
          sv("rect", { x: -4.5, y: -4.5, width: 9, height: 9, rx: 2 }),
          sv("text", { x: 0, y: 3, "text-anchor": "middle" }, closed ? "+" : "−"));
        if (closed) put(t, sv("text", { class: "more", x: 7, y: 3 }, "+" + (this.size[i] - 1)));
        // the toggle is a sibling so that clicking it does not open the node
        const wrap = sv("g", { transform: "translate(" + this.xs[i].toFixed(1) + "," + this.ys[i] + ")" });
        put(wrap, t);
        const outer = sv("g", {}, g, wrap);
        return outer;
      }
      return g;
    }
    select(id) {
      this.selected = id;
      for (const g of this.nodeLayer.querySelectorAll(".node.sel")) g.classList.remove("sel");
      if (id != null) {
        const g = this.nodeLayer.querySelector('.node[data-id="' + id + '"]');
        if (g) g.classList.add("sel");
      }
    }
    expandAll() { this.collapsed.clear(); this.layout(); this.draw(true); }
  }

  // ======================================================================================
  // Score-over-time plot
  // ======================================================================================
  function scorePlot(svg, cols, run, onPick) {
    clear(svg);
    const rect = svg.getBoundingClientRect();
    const W = rect.width || 480, H = rect.height || 220;
    const m = { l: 60, r: 12, t: 10, b: 24 };
    const maximize = !!run.maximize;
    // time from the run's start; a fork's copied history finished before the fork was
    // made (in its parent's time): it is drawn at 0, where the fork's search starts from it
    const fork = run.parent_run != null && run.created_at != null;
    let t0 = run.created_at || Infinity;
    if (!fork) for (const c of cols.created) if (c != null && c < t0) t0 = c;
    if (!Number.isFinite(t0)) t0 = 0;
    const pts = [];
    for (let i = 0; i < cols.id.length; i++) {
      if (cols.status[i] !== "succeeded" || cols.score[i] == null || cols.finished[i] == null) continue;
      pts.push({ id: cols.id[i], t: Math.max(0, cols.finished[i] - t0), s: cols.score[i], alarm: !!cols.alarm[i], i });
    }
    pts.sort((a, b) => a.t - b.t);
    const step = [];
    let best = null;
    for (const p of pts) {
      if (p.alarm) continue;
      if (best == null || (maximize ? p.s > best : p.s < best)) { best = p.s; step.push([p.t, best]); }
    }
    const tIndex = new Map(pts.map((p) => [p.id, p.t]));
    const hold = (cols.holdout || []).filter((h) => h.score != null && tIndex.has(h.node)).map((h) => ({ id: h.node, t: tIndex.get(h.node), s: h.score }));
    if (!pts.length) {
      put(svg, sv("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "muted", fill: "#667085" }, "no scored candidates yet"));
      return;
    }
    const all = pts.map((p) => p.s).sort((a, b) => a - b);
    const q = (f) => all[Math.min(all.length - 1, Math.max(0, Math.round(f * (all.length - 1))))];
    const base = run.baseline_score != null && Number.isFinite(run.baseline_score) ? [run.baseline_score] : [];
    let lo = Math.min(q(0.03), ...step.map((s) => s[1]), ...hold.map((h) => h.s), ...base);
    let hi = Math.max(q(0.97), ...step.map((s) => s[1]), ...hold.map((h) => h.s), ...base);
    if (hi === lo) { hi += Math.abs(hi) * 0.1 || 1; lo -= Math.abs(lo) * 0.1 || 1; }
    const pad = (hi - lo) * 0.06; lo -= pad; hi += pad;
    let tmax = 1;
    for (const p of pts) if (p.t > tmax) tmax = p.t;
    tmax *= 1.02;
    const X = (t) => m.l + (t / tmax) * (W - m.l - m.r);
    const Y = (s) => m.t + (1 - (Math.max(lo, Math.min(hi, s)) - lo) / (hi - lo)) * (H - m.t - m.b);
    const grid = sv("g", { class: "grid" }), axis = sv("g", { class: "axis" });
    for (const tick of niceTicks(lo, hi, 5)) {
      const y = Y(tick.v);
      put(grid, sv("line", { x1: m.l, x2: W - m.r, y1: y, y2: y }));
      put(axis, sv("text", { x: m.l - 4, y: y + 3, "text-anchor": "end", class: "ytick" }, tick.label));
    }
    const nx = Math.max(2, Math.min(5, Math.floor((W - m.l - m.r) / 64))); // labels ~50 px wide
    for (let j = 0; j <= nx; j++) {
      const t = (tmax * j) / nx;
      put(axis, sv("text", { x: X(t), y: H - 8, "text-anchor": j === 0 ? "start" : j === nx ? "end" : "middle" }, j === 0 && fork ? "fork" : fmtDur(t)));
    }
    put(axis, sv("line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }));
    put(axis, sv("line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
    put(svg, [grid, axis]);
    if (base.length) {
      const y = Y(base[0]);
      put(svg, sv("g", { class: "baseline" },
        sv("line", { x1: m.l, x2: W - m.r, y1: y, y2: y }, sv("title", {}, "baseline " + fmtNum(base[0], digitsApart([base[0], best])))),
        sv("text", { x: W - m.r - 2, y: y - 3, "text-anchor": "end" }, "baseline")));
    }
    if (step.length) {
      let d = "M" + X(step[0][0]) + " " + Y(step[0][1]);
      for (let j = 1; j < step.length; j++) d += "H" + X(step[j][0]) + "V" + Y(step[j][1]);
      d += "H" + X(tmax);
      put(svg, sv("path", { class: "step", d }));
    }
    const color = makeScale(pts.filter((p) => !p.alarm).map((p) => p.s), maximize);
    if (pts.length > 2000) {
      // many points: one path per colour bucket, no per-dot elements
      const buckets = new Map();
      for (const p of pts) {
        const c = p.alarm ? "#f59e0b" : color(p.s);
        buckets.set(c, (buckets.get(c) || "") + "M" + X(p.t).toFixed(1) + " " + Y(p.s).toFixed(1) + "h2v2h-2z");
      }
      for (const [c, d] of buckets) put(svg, sv("path", { d, fill: c, stroke: "none" }));
    } else {
      const g = sv("g", {});
      for (const p of pts) {
        const out = p.s < lo || p.s > hi;
        put(g, sv("circle", { class: "dot" + (p.alarm ? " alarm" : ""), cx: X(p.t), cy: Y(p.s), r: out ? 2.5 : 3.6,
          fill: p.alarm ? "#fde68a" : color(p.s), "data-id": p.id, onclick: () => onPick(p.id) },
          sv("title", {}, "#" + p.id + " · " + fmtNum(p.s, digitsApart([p.s, run.baseline_score])) + (p.alarm ? " · ALARM" : "") + (out ? " (off scale)" : ""))));
      }
      put(svg, g);
    }
    for (const h of hold) {
      const x = X(h.t), y = Y(h.s);
      put(svg, sv("path", { class: "hold", d: "M" + x + " " + (y - 5) + "l5 5l-5 5l-5 -5z" }, sv("title", {}, "holdout #" + h.id + " · " + fmtNum(h.s))));
    }
  }

  // ======================================================================================
  // Run page
  // ======================================================================================
  const PER_NODE = ["parent", "status", "score", "op", "created", "finished", "alarm", "verified", "hypothesis"];
  // the columns ``held`` with the delta ``d`` of /nodes?since= merged in (in place): its
  // nodes replace or join theirs; best, lineage, holdout and the cursor are d's
  function mergeColumns(held, d) {
    const at = new Map();
    held.id.forEach((id, i) => at.set(id, i));
    d.id.forEach((id, j) => {
      let i = at.get(id);
      if (i === undefined) { i = held.id.length; held.id.push(id); at.set(id, i); }
      for (const k of PER_NODE) if (held[k] && d[k]) held[k][i] = d[k][j];
    });
    held.extra_parents = Object.assign(held.extra_parents || {}, d.extra_parents || {});
    for (const k of ["best", "lineage", "holdout", "seq", "n"]) held[k] = d[k];
    return held;
  }
  class RunPage {
    constructor(id, node) {
      this.kind = "run"; this.id = id; this.node = node; this.against = "parent";
      this.es = null; this.lastSeq = 0; this.refreshTimer = null; this.lastRefresh = 0;
      this.destroyed = false; this.ended = false; this.nodeReq = 0;
    }
    url(p) { return "/api/runs/" + encodeURIComponent(this.id) + (p || ""); }
    async mount() {
      crumbs([{ text: "runs", href: "#/" }, { text: this.id }]);
      this.head = el("div", { class: "runhead" });
      this.gauges = el("div", { class: "gauges" });
      this.treeSvg = sv("svg", { id: "tree", role: "img", "aria-label": "the tree of candidates" });
      this.lod = el("div", { class: "lod" });
      this.plotSvg = sv("svg", { id: "plot" });
      this.log = el("div", { id: "log" });
      this.logState = el("span", { class: "muted" });
      this.evo = el("div", { class: "section" });
      this.learnt = el("div", { class: "section", id: "learning" });
      const treeBar = el("span", { class: "treebar" },
        el("button", { class: "small", onclick: () => { this.tree.userMoved = false; this.tree.fit(); this.tree.draw(true); } }, "fit"),
        el("button", { class: "small", onclick: () => this.run && this.run.best_node != null && this.tree.focus(this.run.best_node) }, "best"),
        el("button", { class: "small", onclick: () => this.tree.expandAll() }, "expand all"));
      this.body = el("div", { class: "runbody" },
          el("div", { class: "card", id: "treecard" }, el("h3", {}, "tree", el("span", { class: "grow" }), treeBar), this.lod, this.treeSvg, this.legend()),
          el("div", { class: "right" },
            el("div", { class: "card" }, el("h3", {}, "score over time", el("span", { class: "grow" }), el("span", { class: "muted", style: "text-transform:none" }, "● candidate  ━ best so far  ┄ baseline  ◆ holdout")), this.plotSvg),
            el("div", { class: "card", id: "logcard" }, el("h3", {}, "live log", el("span", { class: "grow" }), this.logState), this.log)));
      put(app, [this.head, this.gauges, this.body, this.learnt, this.evo]);
      this.panel = el("aside", { id: "panel", hidden: true });
      app.appendChild(this.panel);
      this.tree = new TreeView(this.treeSvg, (id) => this.pick(id));
      this.tree.lodNote = this.lod;
      this.onResize = () => { this.fitBody(); if (this.cols) { scorePlot(this.plotSvg, this.cols, this.run, (id) => this.pick(id)); this.tree.draw(true); } };
      window.addEventListener("resize", this.onResize);
      const t0 = performance.now();
      await this.refresh();
      window.__revtreeTreeMs = performance.now() - t0;
      this.treeSvg.setAttribute("data-ready", "1");
      await this.loadTail();
      this.stream();
      if (this.node != null) this.showNode(this.node);
      this.loadIslands();
    }
    fitBody() {
      // the tree and the log fill the window below the header (at least 420 px)
      const top = this.body.getBoundingClientRect().top + window.scrollY;
      const narrow = window.matchMedia("(max-width: 1000px)").matches;
      this.body.style.height = narrow ? "" : Math.max(420, window.innerHeight - top - 10) + "px";
    }
    legend() {
      const dot = (attrs, extra) => sv("svg", { width: 16, height: 16, viewBox: "-8 -8 16 16" }, sv("circle", Object.assign({ r: 5, "stroke-width": 1.4 }, attrs)), extra || null);
      return el("div", { class: "legend" },
        el("span", {}, "worse ", el("span", { class: "ramp", style: "background:linear-gradient(90deg," + [0, .25, .5, .75, 1].map(rampColor).join(",") + ")" }), " better"),
        el("span", {}, dot({ fill: "#fff", stroke: "#b91c1c" }, sv("path", { d: "M-2.5 -2.5L2.5 2.5M2.5 -2.5L-2.5 2.5", stroke: "#b91c1c", "stroke-width": 1.4 })), "failed"),
        el("span", {}, dot({ fill: "#fff", stroke: "#d97706", "stroke-dasharray": "2 1.5" }), "rejected"),
        el("span", {}, dot({ fill: "#fff", stroke: "#2563eb", "stroke-dasharray": "3 2" }), "in flight"),
        el("span", {}, dot({ fill: "#fef3c7", stroke: "#b45309", "stroke-width": 2.2 }, sv("path", { d: "M-2 -2.5h4l-4 5h4z", fill: "none", stroke: "#b45309", "stroke-width": 1 })), "waits for approval"),
        el("span", {}, sv("svg", { width: 16, height: 16, viewBox: "-8 -8 16 16" }, sv("circle", { r: 7, fill: "none", stroke: "#6d28d9" }), sv("circle", { r: 4, fill: "#91cf60", stroke: "#334155" })), "verified"),
        el("span", {}, sv("svg", { width: 14, height: 14, viewBox: "-7 -7 14 14" }, sv("path", { d: "M0 -6l6 10h-12z", fill: "#d97706" })), "alarm"),
        el("span", {}, sv("svg", { width: 22, height: 10 }, sv("path", { d: "M0 5H22", stroke: "#7c3aed", "stroke-width": 2.6 })), "best lineage"),
        el("span", {}, sv("svg", { width: 22, height: 10 }, sv("path", { d: "M0 5H22", stroke: "#0f766e", "stroke-width": 1.6, "stroke-dasharray": "4 3" })), "crossover"));
    }
    destroy() {
      this.destroyed = true;
      if (this.es) this.es.close();
      clearTimeout(this.refreshTimer);
      clearTimeout(this.reviveTimer);
      window.removeEventListener("resize", this.onResize);
      if (this.panel) this.panel.remove();
      document.body.classList.remove("panel-open");
    }
    refresh() {
      // one at a time: a delta is merged into what the one before it left
      const next = (this.refreshing || Promise.resolve()).catch(() => {}).then(() => this.refreshNow());
      this.refreshing = next;
      return next;
    }
    async fetchNodes() {
      // after the first load only the nodes changed since the last answer's event seq
      // (docs/dashboard.md); the whole again when the count says a node was missed
      const held = this.cols;
      if (!held || held.seq == null) return api(this.url("/nodes"));
      const d = await api(this.url("/nodes?since=" + held.seq));
      if (d.since == null) return d;
      const merged = mergeColumns(held, d);
      return merged.id.length === d.n ? merged : api(this.url("/nodes"));
    }
    async refreshNow() {
      const [run, cols] = await Promise.all([api(this.url()), this.fetchNodes()]);
      if (this.destroyed) return;
      const first = !this.cols;
      this.run = run; this.cols = cols;
      this.lastRefresh = Date.now();
      this.renderHead();
      this.renderGauges();
      this.renderLearning();
      this.fitBody();
      this.tree.waiting = new Set(run.waiting || []);
      this.tree.setData(cols, !!run.maximize);
      if (first || !this.tree.userMoved) this.tree.fit();
      this.tree.draw(true);
      this.tree.select(this.node);
      scorePlot(this.plotSvg, cols, run, (id) => this.pick(id));
      // the open panel follows its node: re-read it when its row or the waiting list moved
      const waitingMoved = this.waitingChanged();
      if (this.node != null && this.panelNode === this.node && (waitingMoved || this.nodeSig(this.node) !== this.panelSig)) this.showNode(this.node, true);
    }
    nodeSig(id) {
      const i = this.tree.index ? this.tree.index.get(id) : undefined;
      const c = this.cols;
      return i === undefined ? "" : [c.status[i], c.score[i], c.finished[i], c.alarm && c.alarm[i]].join("|");
    }
    waitingChanged() {
      const w = JSON.stringify(this.run.waiting || []);
      const changed = w !== this.lastWaiting;
      this.lastWaiting = w;
      return changed;
    }
    scheduleRefresh() {
      if (this.destroyed) return;
      // an event during a refresh in flight (its reads may be older than the event: the
      // run's last event, "stopped", came while it read) asks for one more after it
      if (this.refreshTimer) { this.refreshAgain = true; return; }
      const wait = Math.max(0, 1000 - (Date.now() - this.lastRefresh));
      this.refreshTimer = setTimeout(async () => {
        this.refreshAgain = false;
        try { await this.refresh(); } catch (e) { /* the next event retries */ }
        this.refreshTimer = null;
        if (this.refreshAgain) this.scheduleRefresh();
      }, wait);
    }
    renderHead() {
      const r = this.run;
      const h = clear(this.head);
      document.title = (r.task || "run") + " · " + r.status + " · revtree";
      const kv = (k, v) => el("span", { class: "kv" }, k + " ", el("b", {}, v));
      const l1 = el("div", { class: "line" }), l2 = el("div", { class: "line stats" });
      put(h, [l1, l2]);
      put(l1, el("h2", {}, r.task || "run"));
      put(l1, el("span", { class: "mono muted runid", title: r.run_id || this.id }, r.run_id || this.id));
      put(l1, el("span", { id: "run-status", "data-status": r.status, title: r.reason || "" }, badge(r.status)));
      // a stopped or failed run offers the page's resume button, in its reason where the
      // reason names the plain `revtree resume` (not a variant with flags), else at the end
      const resumable = canAct() && (r.status === "stopped" || r.status === "failed");
      const resume = resumable ? this.resumeButton() : null;
      const hint = r.reason ? /`revtree resume(?: [^`\s-][^`\s]*)?`/.exec(r.reason) : null;
      if (r.reason && resume && hint) {
        // the text around the button may be cut (an ellipsis), never the button
        put(l1, el("span", { class: "reasonbox", title: r.reason, id: "run-reason" },
          el("span", { class: "muted reason" }, r.reason.slice(0, hint.index)), resume,
          el("span", { class: "muted reason" }, r.reason.slice(hint.index + hint[0].length))));
      } else if (r.reason) put(l1, el("span", { class: "muted reason", title: r.reason, id: "run-reason" }, r.reason));
      put(l1, this.family(r));
      if (r.alarms && r.alarms.length) put(l1, badge("alarm", r.alarms.length + " alarm" + (r.alarms.length > 1 ? "s" : "")));
      put(l2, kv("policy", r.policy || "–"));
      // a node waiting for approval is not in flight (the summary counts it apart)
      const held = r.n_waiting || 0, flying = r.n_in_flight || 0;
      if (r.n_nodes != null) {
        put(l2, el("span", { class: "kv", id: "run-counts" }, el("b", {}, String(r.n_nodes)), " nodes",
          r.n_failed ? [" · ", el("b", { style: "color:#b91c1c" }, String(r.n_failed)), " failed"] : null,
          r.n_rejected ? [" · ", el("b", { style: "color:#b45309" }, String(r.n_rejected)), " rejected"] : null,
          flying ? [" · ", el("b", { style: "color:#1d4ed8" }, String(flying)), " in flight"] : null,
          held ? [" · ", el("b", { style: "color:#b45309" }, String(held)), " waiting"] : null,
          r.n_inherited ? [" · ", el("b", {}, String(r.n_inherited)), " inherited"] : null));
      }
      const hold = (r.holdout || []).filter((x) => x.score != null && x.node === r.best_node);
      const dg = digitsApart([r.best_score, r.baseline_score, hold.length ? hold[hold.length - 1].score : null]);
      const best = kv(r.maximize ? "best (max)" : "best (min)", fmtNum(r.best_score, dg));
      if (r.best_node != null) put(best, [" ", el("a", { href: "#/run/" + encodeURIComponent(this.id) + "/node/" + r.best_node }, "#" + r.best_node)]);
      put(l2, best);
      put(l2, kv("baseline", fmtNum(r.baseline_score, dg)));
      if (r.gain) {
        const g = r.gain;
        put(l2, kv("gain", fmtNum(g.delta) + (g.stderr != null ? " ± " + fmtNum(g.stderr, 2) : "") +
          (g.beyond_noise === true ? " (beyond noise)" : g.beyond_noise === false ? " (within noise)" : "")));
      } else if (r.improvement != null) {
        put(l2, kv("gain", fmtNum(r.improvement * 100, 2) + "%"));
      }
      if (hold.length) put(l2, kv("holdout", fmtNum(hold[hold.length - 1].score, dg)));
      const fin = r.final_holdout;
      if (fin && fin.better === false) put(l2, el("span", { class: "kv", id: "final-no-better", style: "color:#b91c1c" }, fin.message));
      if (r.llm && r.llm.calls) put(l2, kv("LLM", r.llm.calls + " calls, " + fmtUsd(r.llm.usd)));
      const waiting = r.waiting || [];
      if (waiting.length) put(l2, el("span", { class: "kv waiting" }, "waiting for approval: ", waiting.map((n, j) => [j ? ", " : "", el("a", { href: "#/run/" + encodeURIComponent(this.id) + "/node/" + n }, "#" + n)])));
      if (canAct()) {
        const acts = el("span", { class: "actions" });
        if (r.status === "running") acts.appendChild(action("stop", async () => {
          const res = await post(this.url("/stop"));
          toast(res.message || "stop requested");
          this.scheduleRefresh();
        }, "danger"));
        else if (resume && !hint) acts.appendChild(resume);
        put(l1, acts);
      }
    }
    family(r) {
      // links to the run this one was forked from (at its node) and to the runs forked from it
      const runLink = (id, node) => el("a", { href: "#/run/" + encodeURIComponent(id) + (node != null ? "/node/" + node : "") }, id + (node != null ? " @" + node : ""));
      const forks = r.forks || [];
      if (!r.parent_run && !forks.length) return null;
      return el("span", { class: "kv family", id: "run-family" },
        r.parent_run ? ["fork of ", runLink(r.parent_run, r.parent_node)] : null,
        r.parent_run && forks.length ? " · " : null,
        forks.length ? ["forks: ", forks.map((f, j) => [j ? ", " : "", el("a", { href: "#/run/" + encodeURIComponent(f.id), title: "forked at node " + f.node + " · " + f.status }, f.id)])] : null);
    }
    resumeButton() {
      return action("resume", async () => {
        const res = await post(this.url("/resume"));
        toast(res.message || "resumed");
        this.watchRevival(1000, 60);
      }, "primary small");
    }
    renderGauges() {
      const b = this.run.budget || {};
      const g = clear(this.gauges);
      const one = (label, v, fmt) => {
        v = v || {};
        const used = v.used, max = v.max;
        const frac = max ? Math.min(1, (used || 0) / max) : null;
        const bar = el("i", { class: max == null ? "none" : frac > 0.9 ? "hot" : "", style: "width:" + (max == null ? 100 : (frac * 100).toFixed(1)) + "%" });
        return el("div", { class: "gauge", "data-gauge": label },
          el("div", { class: "label" }, el("span", {}, label), el("span", {}, el("b", {}, fmt(used)), " / " + (max == null ? "∞" : fmt(max)))),
          el("div", { class: "bar" }, bar));
      };
      // a fork's history was evaluated by its parent run: said apart from this run's own
      const before = this.run.inherited_sandbox_seconds || 0;
      const sandbox = one("sandbox time", b.sandbox_seconds, fmtDur);
      if (before) {
        const label = sandbox.querySelector(".label span");
        label.textContent += " (" + fmtDur(before) + " inherited)";
        sandbox.title = fmtDur(before) + " of it spent by run " + this.run.parent_run + " on the nodes this fork took over; the wall time is this run's own";
      }
      // near twins are refused before evaluation and not counted toward max_nodes
      const nodes = one("nodes", b.nodes, (x) => (x == null ? "–" : String(x)));
      const twins = (b.nodes || {}).twins || 0;
      if (twins) {
        nodes.querySelector(".label span").textContent += " (+" + twins + " near twin" + (twins === 1 ? "" : "s") + ")";
        nodes.title = twins + " candidate" + (twins === 1 ? " was" : "s were") + " refused unevaluated as near twins; they do not count toward max_nodes";
      }
      put(g, [nodes, one("wall time", b.wall, fmtDur),
        sandbox, one("dollars", b.usd, fmtUsd)]);
    }
    // -- live log ----------------------------------------------------------------------
    logRow(e, fresh) {
      const row = el("div", { class: "ev" + (fresh ? " new" : ""), "data-seq": e.seq },
        el("span", { class: "t" }, fmtTime(e.ts)),
        el("span", { class: "k " + (e.kind || ""), title: e.kind || "" }, e.kind || ""),
        e.node_id != null ? el("a", { href: "#/run/" + encodeURIComponent(this.id) + "/node/" + e.node_id }, "#" + e.node_id) : el("span", {}),
        el("span", { class: "m" }, e.message || ""));
      return row;
    }
    appendEvents(events, fresh) {
      const atBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 30;
      const frag = document.createDocumentFragment();
      for (const e of events) {
        if (e.seq <= this.lastSeq) continue;
        this.lastSeq = e.seq;
        frag.appendChild(this.logRow(e, fresh));
      }
      this.log.appendChild(frag);
      while (this.log.childNodes.length > 1500) this.log.removeChild(this.log.firstChild);
      if (atBottom || !fresh) this.log.scrollTop = this.log.scrollHeight;
    }
    async loadTail() {
      const last = this.run.last_seq || 0;
      const after = Math.max(0, last - 300);
      try {
        const data = await api(this.url("/events?after=" + after + "&limit=300"));
        this.appendEvents(data.events || [], false);
      } catch (e) { /* the stream still works */ }
      this.lastSeq = Math.max(this.lastSeq, after);
    }
    stream() {
      if (this.es) this.es.close();
      if (typeof EventSource === "undefined") return;
      const es = new EventSource(this.url("/stream?after=" + this.lastSeq));
      this.es = es;
      this.logState.textContent = "connecting…";
      es.onopen = () => { this.logState.textContent = "live"; };
      es.addEventListener("log", (m) => {
        let e;
        try { e = JSON.parse(m.data); } catch (err) { return; }
        if (e.seq == null && m.lastEventId) e.seq = Number(m.lastEventId);
        this.appendEvents([e], true);
        this.scheduleRefresh();
      });
      es.addEventListener("end", () => {
        es.close();
        this.ended = true;
        this.logState.textContent = "run finished";
        if (this.cols) this.cols.seq = null; // the last read is whole: whatever no event named
        this.scheduleRefresh();
        this.watchRevival(10000, Infinity);
      });
      es.onerror = () => {
        if (this.ended) return;
        this.logState.textContent = es.readyState === 2 ? "disconnected" : "reconnecting…";
        if (es.readyState === 2 && !this.destroyed) setTimeout(() => { if (!this.destroyed && this.es === es) this.stream(); }, 3000);
      };
    }
    watchRevival(every, tries) {
      // a finished run that runs again (resumed here or from a terminal): poll its status
      // until it runs, then follow its stream again
      clearTimeout(this.reviveTimer);
      const tick = async () => {
        if (this.destroyed) return;
        try {
          const run = await api(this.url());
          if (run.status === "running" || (run.last_seq || 0) > this.lastSeq) {
            await this.refresh();
            if (this.ended || !this.es || this.es.readyState === 2) { this.ended = false; this.stream(); }
            return;
          }
        } catch (e) { /* try again */ }
        if (--tries > 0) this.reviveTimer = setTimeout(tick, every);
        else if (every < 10000) this.watchRevival(10000, Infinity);
      };
      this.reviveTimer = setTimeout(tick, every);
    }
    // -- what the search learnt: the bandits (models, operators), the near-twin check --
    renderLearning() {
      const r = this.run || {}, models = r.models || {}, nov = r.novelty || {};
      const roles = Object.keys(models), saved = nov.evaluations_saved || 0;
      const ops = Object.entries((r.operators || {}).arms || {});
      const box = clear(this.learnt);
      if (!roles.length && !saved && !ops.length) return;
      const body = el("div", { class: "learnt" });
      const card = el("div", { class: "card" }, el("h3", {}, "what the search learnt"), body);
      // one table per bandit: an arm a row (name, candidates, a bar of them, mean reward)
      const bandit = (role, arms, key) => {
        const most = Math.max(1, ...arms.map(([, a]) => a.pulls || 0));
        return el("table", { class: "bandit", "data-role": role },
          el("tbody", {}, arms.map(([name, a]) => el("tr", { ["data-" + key]: name },
            el("td", {}, name),
            el("td", { class: "num" }, String(a.pulls || 0)),
            el("td", { class: "barcell" }, el("i", { style: "width:" + (100 * (a.pulls || 0) / most).toFixed(0) + "%" })),
            el("td", { class: "num" }, a.mean_reward == null ? "–" : a.mean_reward.toFixed(2))))));
      };
      for (const role of roles) {
        put(body, el("div", { class: "muted" }, role + "'s models, chosen by a bandit (Thompson sampling): candidates and mean reward (0–1)"));
        put(body, bandit(role, Object.entries(models[role].models || {}), "model"));
      }
      if (ops.length) {
        put(body, el("div", { class: "muted" }, "operators chosen by a bandit (Thompson sampling): candidates and mean reward (0–1)"));
        put(body, bandit("operators", ops, "operator"));
      }
      const byMeaning = nov.by_embeddings != null && nov.embeddings_threshold < 1;
      if ((nov.threshold != null && nov.threshold < 1) || byMeaning) {
        put(body, el("p", { id: "novelty" }, el("b", {}, String(saved)),
          " candidate" + (saved === 1 ? " was" : "s were") + " refused before evaluation as near twins of evaluated ones (similarity ≥ " + nov.threshold + "): " +
          saved + " evaluation" + (saved === 1 ? "" : "s") + " saved" +
          (byMeaning ? "; " + nov.by_embeddings + " of them by the embeddings of their changes (cosine ≥ " + nov.embeddings_threshold + ")" : "")));
      }
      put(box, card);
    }
    // -- evolution ---------------------------------------------------------------------
    async loadIslands() {
      let data;
      try { data = await api(this.url("/islands")); } catch (e) { return; }
      const islands = data.islands || [], cells = data.cells || [];
      if (!islands.length && !cells.length) return;
      const color = makeScale(cells.map((c) => c.score), !!this.run.maximize);
      const card = el("div", { class: "card", id: "evolution" }, el("h3", {}, "evolution: islands and cells"));
      const isl = el("div", { class: "islands" });
      const cell = (c) => el("div", { class: "cell", style: "background:" + color(c.score), title: shortJson(c.key) + " · #" + c.node + " · " + fmtNum(c.score),
        onclick: () => this.pick(c.node) }, shortJson(c.key));
      const grouped = cells.length && cells.every((c) => c.island != null);
      for (const i of islands) {
        const nodes = Array.isArray(i.nodes) ? i.nodes.length : i.nodes;
        const best = i.best && typeof i.best === "object" ? i.best : { node: i.best };
        const mine = grouped ? cells.filter((c) => c.island === i.id) : [];
        put(isl, el("div", { class: "island", "data-island": i.id }, el("b", {}, "island " + i.id),
          el("span", { class: "muted" }, nodes + " nodes" + (mine.length ? " · " + mine.length + " cells" : "")),
          best.node != null ? el("div", {}, "best ", el("a", { href: "#/run/" + encodeURIComponent(this.id) + "/node/" + best.node }, "#" + best.node), best.score != null ? " " + fmtNum(best.score) : "") : null,
          mine.length ? el("div", { class: "cells" }, mine.map(cell)) : null));
      }
      put(card, isl);
      if (cells.length && !grouped) put(card, el("div", { class: "cells" }, cells.map(cell)));
      put(clear(this.evo), card);
    }
    // -- node panel --------------------------------------------------------------------
    pick(id) { location.hash = "#/run/" + encodeURIComponent(this.id) + "/node/" + id; }
    async showNode(id, quiet) {
      this.node = id;
      if (this.tree) this.tree.select(id);
      if (id == null) { this.panel.hidden = true; this.panelNode = null; this.placePanel(); return; }
      const req = ++this.nodeReq;
      this.panelNode = id;
      const opened = this.panel.hidden;
      this.panel.hidden = false;
      if (opened) this.placePanel();
      if (!quiet) put(clear(this.panel), this.panelHead(id, null), el("div", { class: "empty" }, "loading node " + id + "…"));
      let n;
      try { n = await api(this.url("/nodes/" + id + "?against=" + this.against)); } catch (e) {
        if (req === this.nodeReq) put(clear(this.panel), this.panelHead(id, null), el("div", { class: "empty" }, "error: " + e.message));
        return;
      }
      if (req !== this.nodeReq || this.destroyed) return;
      this.panelSig = this.nodeSig(id);
      this.renderPanel(n);
    }
    placePanel() {
      // the open panel takes its own room (beside the page, or below it on a narrow
      // window): the tree, the plot and the log reflow instead of being covered
      document.body.classList.toggle("panel-open", !this.panel.hidden);
      this.onResize();
      if (this.tree && this.cols && !this.tree.userMoved) { this.tree.fit(); this.tree.draw(true); }
      if (!this.panel.hidden && window.matchMedia("(max-width: 1000px)").matches) this.panel.scrollIntoView({ block: "start" });
    }
    isWaiting(id) { return !!(this.run && (this.run.waiting || []).includes(id)); }
    panelHead(id, n) {
      return el("div", { class: "phead" },
        el("h2", {}, "node #" + id),
        n ? badge(this.isWaiting(id) ? "waiting" : n.status, nodeWord(n.status, this.isWaiting(id))) : null,
        n && n.alarm ? badge("alarm", "alarm") : null,
        n && n.operator ? el("span", { class: "muted" }, n.operator) : null,
        n && n.score != null ? el("span", {}, "score ", el("b", { id: "node-score" }, fmtNum(n.score, digitsApart([n.score, this.run && this.run.baseline_score]))), n.score_std ? " ± " + fmtNum(n.score_std, 2) : "") : null,
        el("button", { class: "close small", title: "close", onclick: () => { location.hash = "#/run/" + encodeURIComponent(this.id); } }, "✕"));
    }
    renderPanel(n) {
      const p = clear(this.panel);
      const id = n.id;
      const runLink = (x) => el("a", { href: "#/run/" + encodeURIComponent(this.id) + "/node/" + x }, "#" + x);
      put(p, this.panelHead(id, n));
      const facts = el("div", { class: "muted" });
      if (n.parent != null) put(facts, ["parent ", runLink(n.parent), " · "]);
      put(facts, "depth " + (n.depth ?? "–") + " · " + (n.n_evaluations ?? 0) + " evaluations");
      if (n.commit) put(facts, [" · ", el("span", { class: "mono" }, String(n.commit).slice(0, 10))]);
      const first = el("section", {}, facts);
      if (n.error) put(first, el("pre", { class: "tail", style: "color:#991b1b" }, (n.error_kind ? n.error_kind + ": " : "") + n.error));
      if (n.alarm) put(first, el("div", {}, badge("alarm", "drift alarm"), " ", (n.alarm.kind || "") + " " + (n.alarm.message || "")));
      put(p, first);
      // hypothesis and plan: text only
      put(p, el("section", { id: "hypothesis" }, el("h4", {}, "hypothesis"),
        el("div", { class: "hyp" }, n.hypothesis || "(none)"),
        n.plan ? [el("h4", { style: "margin-top:6px" }, "plan"), el("pre", { class: "plan" }, typeof n.plan === "string" ? n.plan : JSON.stringify(n.plan, null, 2))] : null,
        n.knobs ? el("div", { class: "mono", style: "margin-top:4px" }, Object.entries(n.knobs).map(([k, v]) => k + "=" + shortJson(v)).join("  ")) : null));
      // actions
      if (canAct()) {
        const acts = el("div", { class: "pactions" });
        const waiting = this.isWaiting(id);
        if (waiting) {
          put(acts, action("approve", async () => { const r = await post(this.url("/approve"), { node: id }); toast(r.message || "approved"); this.scheduleRefresh(); }, "primary"));
          const why = el("input", { type: "text", placeholder: "why (reject)", style: "width:180px" });
          put(acts, [why, action("reject", async () => { const r = await post(this.url("/reject"), { node: id, why: why.value }); toast(r.message || "rejected"); this.scheduleRefresh(); }, "danger")]);
        }
        const step = el("select", { title: "the step the retry starts from", "aria-label": "retry from" },
          ["evaluate", "code", "propose"].map((x) => el("option", { value: x }, "from " + x)));
        put(acts, el("span", { class: "seg" }, action("retry", async () => {
          const r = await post(this.url("/retry"), { node: id, from: step.value });
          toast(r.message || "retrying");
          this.scheduleRefresh();
          if (this.ended) this.watchRevival(1000, 30);
        }), step));
        const form = el("div", { class: "forkform", hidden: true });
        const ta = el("textarea", { placeholder: "settings, one k=v a line (e.g. search.policy=mcts)" });
        put(form, [ta, el("div", {}, action("fork", async () => {
          const set = ta.value.split(/\n|,/).map((s) => s.trim()).filter(Boolean);
          const r = await post(this.url("/fork"), { node: id, set });
          toast((r.message || "forked") + (r.run ? " → " + r.run : ""));
          if (r.run) location.hash = "#/run/" + encodeURIComponent(r.run);
        }, "primary"))]);
        put(acts, el("button", { onclick: () => { form.hidden = !form.hidden; } }, "fork from here…"));
        put(p, el("section", {}, el("h4", {}, "actions"), acts, form));
      }
      // diff
      const seg = el("span", { class: "seg" });
      for (const a of ["parent", "root"]) {
        put(seg, el("button", { class: "small" + (this.against === a ? " on" : ""), "data-against": a, onclick: () => { this.against = a; this.showNode(id, true); } }, "vs " + a));
      }
      const diff = el("div", { class: "diff", id: "diff" });
      if (n.diff_html) {
        const pre = el("pre", { class: "highlight" });
        pre.innerHTML = n.diff_html; // Pygments' HTML (its input escaped), the one innerHTML of the page
        diff.appendChild(pre);
      } else put(diff, el("div", { class: "empty" }, n.diff_note || "(no change)"));
      let stat = null;
      if (Array.isArray(n.diff_stat) && n.diff_stat.length) {
        stat = el("div", { class: "diffstat" }, n.diff_stat.map((f) => el("div", {}, el("span", { style: "color:#15803d" }, "+" + f.added), " ",
          el("span", { style: "color:#b91c1c" }, "-" + f.removed), " " + f.file)));
      } else if (typeof n.diff_stat === "string" && n.diff_stat) stat = el("pre", { class: "diffstat" }, n.diff_stat);
      const vs = n.diff_against != null ? el("span", { class: "muted", style: "text-transform:none" }, "against #" + n.diff_against) : null;
      put(p, el("section", {}, el("h4", {}, "diff", seg, vs), stat, n.diff_html && n.diff_note ? el("div", { class: "muted" }, n.diff_note) : null, diff));
      // evaluations
      const evs = n.evaluations || [];
      if (evs.length) {
        const sec = el("section", { id: "evaluations" }, el("h4", {}, "evaluations (" + evs.length + ")"));
        const tb = el("tbody");
        for (const e of evs) {
          tb.appendChild(el("tr", {},
            el("td", {}, e.stage || ""), el("td", { class: "num" }, e.repeat ?? ""), el("td", { class: "num" }, e.attempt ?? ""),
            el("td", {}, e.ok ? "ok" : badge("failed", "failed")), el("td", { class: "num" }, fmtNum(e.score)),
            el("td", { class: "num" }, fmtDur(e.duration)), el("td", { class: "muted" }, (e.host || "") + (e.gpus && e.gpus.length ? " gpu " + e.gpus : ""))));
          const extra = [];
          if (e.metrics && Object.keys(e.metrics).length) extra.push(el("div", { class: "mono" }, Object.entries(e.metrics).map(([k, v]) => k + "=" + (typeof v === "number" ? fmtNum(v) : shortJson(v))).join("  ")));
          if (e.stdout_tail) extra.push(el("details", {}, el("summary", {}, "stdout"), el("pre", { class: "tail" }, e.stdout_tail)));
          if (e.stderr_tail) extra.push(el("details", {}, el("summary", {}, "stderr"), el("pre", { class: "tail" }, e.stderr_tail)));
          if (extra.length) tb.appendChild(el("tr", {}, el("td", { colspan: 7 }, extra)));
        }
        put(sec, el("table", { class: "mini" }, el("thead", {}, el("tr", {}, ["stage", "rep", "try", "ok", "score", "time", "host"].map((x) => el("th", {}, x)))), tb));
        put(p, sec);
      }
      // review and lesson
      if (n.review || n.lesson) {
        const sec = el("section", { id: "review" }, n.review ? el("h4", {}, "review") : null);
        if (n.review) {
          const rv = n.review;
          if (typeof rv === "object" && "accepted" in rv) {
            put(sec, el("div", {}, badge(rv.accepted ? "succeeded" : "rejected", rv.accepted ? "accepted" : "rejected"), rv.by ? el("span", { class: "muted" }, " by " + rv.by) : null));
            const reasons = Array.isArray(rv.reasons) ? rv.reasons : rv.reasons ? [rv.reasons] : [];
            if (reasons.length) put(sec, el("ul", { style: "margin:4px 0;padding-left:18px" }, reasons.map((x) => el("li", {}, shortJson(x)))));
          } else put(sec, el("pre", {}, typeof rv === "string" ? rv : JSON.stringify(rv, null, 2)));
        }
        if (n.lesson) put(sec, [el("h4", { style: n.review ? "margin-top:6px" : null }, "lesson"), el("div", {}, shortJson(n.lesson))]);
        put(p, sec);
      }
      // LLM calls
      const calls = n.llm_calls || [];
      if (calls.length) {
        let usd = 0;
        const tb = el("tbody");
        for (const c of calls) {
          usd += c.cost_usd || 0;
          const tokens = c.tokens != null ? (typeof c.tokens === "object" ? Object.values(c.tokens).reduce((a, b) => a + (Number(b) || 0), 0) : c.tokens) : (c.input_tokens || 0) + (c.output_tokens || 0);
          tb.appendChild(el("tr", {}, el("td", {}, c.role || ""), el("td", { class: "mono" }, c.model || ""), el("td", { class: "num" }, String(tokens)),
            el("td", { class: "num" }, fmtUsd(c.cost_usd)), el("td", { class: "num" }, fmtDur(c.latency)), el("td", {}, c.ok === false ? badge("failed", c.error ? "error" : "failed") : "ok")));
          if (c.ok === false && c.error) tb.appendChild(el("tr", {}, el("td", { colspan: 6 }, el("pre", { class: "tail" }, c.error))));
        }
        put(p, el("section", { id: "llm" }, el("h4", {}, "LLM calls (" + calls.length + ", " + fmtUsd(usd) + ")"),
          el("table", { class: "mini" }, el("thead", {}, el("tr", {}, ["role", "model", "tokens", "cost", "latency", ""].map((x) => el("th", {}, x)))), tb)));
      }
      // transcript
      const tr = n.transcript;
      const tcalls = tr && Array.isArray(tr.calls) ? tr.calls : Array.isArray(tr) ? tr : [];
      if (tcalls.length) {
        const sec = el("section", { id: "transcript" }, el("h4", {}, "transcript"));
        for (const c of tcalls) {
          const body = el("div", {});
          for (const part of ["system", "user"]) if (c[part]) put(body, [el("div", { class: "muted" }, part), el("pre", { class: "tail" }, c[part])]);
          if (c.prefix && tr.prefixes && tr.prefixes[c.prefix]) put(body, el("details", {}, el("summary", {}, "shared prefix"), el("pre", { class: "tail" }, tr.prefixes[c.prefix])));
          if (c.response != null) put(body, [el("div", { class: "muted" }, "response"), el("pre", { class: "tail" }, typeof c.response === "string" ? c.response : JSON.stringify(c.response, null, 2))]);
          put(sec, el("details", {}, el("summary", {}, (c.role || "call") + " " + (c.call || "") + " · attempt " + (c.attempt || 1) + " · " + (c.model || "") + (c.ok === false ? " · FAILED" : "")), body));
        }
        put(p, sec);
      }
    }
  }

  // ======================================================================================
  // Compare page
  // ======================================================================================
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#4d7c0f"];
  class ComparePage {
    constructor(ids) { this.kind = "compare"; this.ids = ids; }
    destroy() {}
    async mount() {
      crumbs([{ text: "runs", href: "#/" }, { text: "compare" }]);
      const data = await api("/api/compare?runs=" + this.ids.map(encodeURIComponent).join(","));
      const runs = data.runs || this.ids;
      put(app, el("div", { class: "toolbar" }, el("h2", {}, "Compare " + runs.length + " runs")));
      const svg = sv("svg", { id: "cmpplot" });
      const legend = el("div", { class: "legend" });
      runs.forEach((r, j) => put(legend, el("span", {}, el("span", { class: "swatch", style: "background:" + PALETTE[j % PALETTE.length] }), el("a", { href: "#/run/" + encodeURIComponent(r) }, r))));
      put(app, el("div", { class: "card" }, el("h3", {}, "best so far over time"), svg, legend));
      const tb = el("tbody");
      for (const row of data.rows || []) {
        const [key, vals] = row;
        const dg = digitsApart(vals || []);
        tb.appendChild(el("tr", {}, el("th", {}, key), (vals || []).map((v) => el("td", { class: typeof v === "number" ? "num" : "" }, typeof v === "number" ? fmtNum(v, dg) : shortJson(v)))));
      }
      put(app, el("div", { class: "section" }, el("table", { class: "grid", id: "cmptable" },
        el("thead", {}, el("tr", {}, el("th", {}, ""), runs.map((r, j) => el("th", { class: "runid", style: "color:" + PALETTE[j % PALETTE.length] }, r)))), tb)));
      this.plot(svg, runs, data.curves || {});
    }
    plot(svg, runs, curves) {
      const rect = svg.getBoundingClientRect();
      const W = rect.width || 900, H = rect.height || 320, m = { l: 56, r: 16, t: 12, b: 26 };
      const all = runs.flatMap((r) => curves[r] || []);
      if (!all.length) { put(svg, sv("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#667085" }, "no scores yet")); return; }
      let lo = Math.min(...all.map((p) => p[1])), hi = Math.max(...all.map((p) => p[1]));
      if (lo === hi) { lo -= 1; hi += 1; }
      const pad = (hi - lo) * 0.06; lo -= pad; hi += pad;
      const tmax = Math.max(1, ...all.map((p) => p[0])) * 1.02;
      const X = (t) => m.l + (t / tmax) * (W - m.l - m.r), Y = (s) => m.t + (1 - (s - lo) / (hi - lo)) * (H - m.t - m.b);
      const axis = sv("g", { class: "axis" });
      for (const tick of niceTicks(lo, hi, 5)) {
        const v = tick.v;
        put(axis, [sv("line", { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), stroke: "#eef1f5" }), sv("text", { x: m.l - 4, y: Y(v) + 3, "text-anchor": "end", "font-size": 10, fill: "#667085", class: "ytick" }, tick.label)]);
      }
      for (let j = 0; j <= 5; j++) put(axis, sv("text", { x: X((tmax * j) / 5), y: H - 8, "text-anchor": "middle", "font-size": 10, fill: "#667085" }, fmtDur((tmax * j) / 5)));
      put(svg, axis);
      runs.forEach((r, j) => {
        const c = (curves[r] || []).slice().sort((a, b) => a[0] - b[0]);
        if (!c.length) return;
        let d = "M" + X(c[0][0]) + " " + Y(c[0][1]);
        for (let k = 1; k < c.length; k++) d += "H" + X(c[k][0]) + "V" + Y(c[k][1]);
        d += "H" + X(tmax);
        put(svg, sv("path", { d, fill: "none", stroke: PALETTE[j % PALETTE.length], "stroke-width": 2, "data-run": r }, sv("title", {}, r)));
      });
    }
  }

  // -- start -------------------------------------------------------------------------
  async function start() {
    try { INFO = Object.assign(INFO, await api("/api/info")); } catch (e) { /* keep defaults */ }
    if (!TOKEN) INFO.read_only = true;
    const mode = document.getElementById("mode");
    mode.textContent = (INFO.read_only ? "read-only · " : "") + (INFO.db || "") + (INFO.version ? " · v" + INFO.version : "");
    mode.classList.toggle("ro", !!INFO.read_only);
    document.body.classList.toggle("read-only", !!INFO.read_only);
    window.addEventListener("hashchange", route);
    window.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && page && page.kind === "run" && page.node != null) location.hash = "#/run/" + encodeURIComponent(page.id);
    });
    route();
  }
  start();
})();
