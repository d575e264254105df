// specviz's static site: plays recorded runs whose every frame the Python renderers drew.
// Nothing here decides or draws a token: frames arrive as HTML (and Plotly JSON) in data files
// written by `python -m specviz site`, each an edit of the one before (specviz/site/codec.py);
// this script rebuilds them, shows frame c for step c, and moves c (buttons, slider, keys, a
// timer). The speedup explorer's curves are the one thing computed here: theory.speedup's
// closed form, tau / (c k + V), held to specviz.analysis.theory by the site's tests.
"use strict";
(function () {
  const SV = (window.SV = window.SV || {});
  SV.data = SV.data || {};
  const waiting = {};

  // -- work in flight: <html data-sv-busy="N"> counts the loads and drawings not yet settled, so
  // a page (or a test) can tell when every view it started has been drawn or has failed
  SV.busy = 0;
  const mark = () => { document.documentElement.dataset.svBusy = String(SV.busy); };
  SV.track = function (promise) {
    SV.busy++;
    mark();
    return Promise.resolve(promise).finally(() => { SV.busy--; mark(); });
  };
  mark();

  // -- data: <script src="data/KEY.js"> calls SV.got(KEY, base64 of gzip of JSON) --------------
  SV.got = function (key, packed) {
    SV.data[key] = packed;
    (waiting[key] || []).forEach((done) => done());
    delete waiting[key];
  };

  function script(key, folder) {
    return new Promise((resolve, reject) => {
      if (SV.data[key] !== undefined) return resolve();
      (waiting[key] = waiting[key] || []).push(resolve);
      if (waiting[key].length > 1) return;
      const tag = document.createElement("script");
      tag.src = `${folder || "data"}/${key}.js`;
      tag.onerror = () => reject(new Error(`the site has no recording ${key} (data/${key}.js is missing)`));
      document.head.appendChild(tag);
    });
  }

  async function inflate(packed) {
    const bytes = Uint8Array.from(atob(packed), (ch) => ch.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }
  const unpack = async (packed) => JSON.parse(await inflate(packed));

  const decoded = {};
  SV.load = async function (key, folder) {
    if (!decoded[key]) {
      decoded[key] = SV.track(script(key, folder).then(() => unpack(SV.data[key])));
    }
    return decoded[key];
  };

  // -- frames ----------------------------------------------------------------------------------
  const PIECE = /(?=[<{\[,])/; // specviz.site.codec.PIECE
  const pieces = (text) => text.split(PIECE).filter((p) => p);
  SV.undelta = function (encoded) {
    const out = [];
    let before = [];
    for (const ops of encoded) {
      const frame = ops.map((op) => (typeof op === "string" ? op : before.slice(op[0], op[1]).join(""))).join("");
      out.push(frame);
      before = pieces(frame);
    }
    return out;
  };

  // -- figures: Plotly JSON without its template (the site stores the one template once) -------
  // Plotly's own bundle comes gzip-compressed (assets/plotly.js): decoded and run once, on first use
  let plotly = null;
  SV.plotly = function () {
    if (!plotly) {
      plotly = script("plotly", "assets").then(() => inflate(SV.data.plotly)).then((code) => {
        (0, eval)(code); // eslint-disable-line no-eval -- the vendored bundle, as a <script> would run it
        return window.Plotly;
      });
    }
    return plotly;
  };
  SV.plot = function (el, fig) {
    if (!el) return Promise.resolve();
    return SV.track(SV.plotly().then(() => {
      const layout = Object.assign({}, fig.layout, { template: SV.template, autosize: true });
      const drawn = window.Plotly.react(el, fig.data, layout, { responsive: true, displaylogo: false });
      el.dataset.drawn = (Number(el.dataset.drawn || 0) + 1).toString();
      return drawn;
    }));
  };

  // -- controls --------------------------------------------------------------------------------
  function button(bar, label, title, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.title = title;
    b.setAttribute("aria-label", title);
    b.addEventListener("click", onClick);
    bar.appendChild(b);
    return b;
  }

  let active = null; // the player the keys move: the last one used, else the first on the page
  document.addEventListener("keydown", (e) => {
    const tag = (e.target && e.target.tagName) || "";
    if (["INPUT", "SELECT", "TEXTAREA"].includes(tag) && e.target.type !== "range") return;
    const p = active || SV.players[0];
    if (!p) return;
    const keys = { ArrowLeft: () => p.go(p.cursor - 1), ArrowRight: () => p.go(p.cursor + 1),
      Home: () => p.go(-1), End: () => p.go(p.last), " ": () => p.toggle(), k: () => p.toggle() };
    if (keys[e.key] && !(tag === "BUTTON" && e.key === " ")) {
      e.preventDefault();
      keys[e.key]();
    }
  });
  SV.players = [];

  // A step player: frame c of every part (text, panel, stats, tree, inspector) at cursor c.
  SV.stepPlayer = function (root, view) {
    const parts = {};
    for (const name of ["text", "panel", "stats", "tree", "inspector"]) {
      if (view[name]) parts[name] = SV.undelta(view[name]);
    }
    const n = view.steps;
    root.classList.add("sv-player");
    root.dataset.steps = n;
    const bar = root.querySelector(".sv-controls");
    bar.textContent = "";
    const p = { cursor: n - 1, last: n - 1, timer: null, root };
    const prev = button(bar, "◀ Prev", "Previous step (←)", () => { p.stop(); p.go(p.cursor - 1); });
    const play = button(bar, "▶ Play", "Play (space)", () => p.toggle());
    play.classList.add("sv-play");
    const next = button(bar, "Next ▶", "Next step (→)", () => { p.stop(); p.go(p.cursor + 1); });
    const slider = document.createElement("input");
    slider.type = "range"; slider.min = -1; slider.max = Math.max(0, n - 1); slider.step = 1;
    slider.setAttribute("aria-label", "Step (the far left is the prompt alone)");
    slider.addEventListener("input", () => { p.stop(); p.go(Number(slider.value)); });
    bar.appendChild(slider);
    const where = document.createElement("span");
    where.className = "sv-where";
    where.setAttribute("aria-live", "polite");
    bar.appendChild(where);
    root.querySelector(".sv-legend-slot").innerHTML = view.legend || "";
    const slot = (name) => root.querySelector(`.sv-${name}-slot`);
    p.go = function (c) {
      p.cursor = Math.max(-1, Math.min(n - 1, c));
      for (const name of ["text", "panel", "stats", "tree"]) {
        const el = slot(name);
        if (el && parts[name]) el.innerHTML = parts[name][p.cursor + 1];
      }
      const fig = slot("inspector");
      const shown = parts.inspector ? parts.inspector[p.cursor + 1] : "";
      if (fig) fig.hidden = !shown; // the prompt alone has no position to inspect
      if (fig && shown && !fig.closest("details:not([open])")) SV.plot(fig, JSON.parse(shown));
      slider.value = p.cursor;
      where.textContent = p.cursor < 0 ? `the prompt · ${n} steps` : `step ${p.cursor + 1} of ${n}`;
      root.dataset.cursor = p.cursor;
      if (!root.dataset.drawnAt) root.dataset.drawnAt = performance.now().toFixed(1); // the first view, on the page's clock
      prev.disabled = p.cursor < 0;
      next.disabled = p.cursor >= n - 1;
      active = p;
    };
    p.stop = function () {
      clearInterval(p.timer); p.timer = null;
      play.textContent = "▶ Play"; play.title = "Play (space)"; play.setAttribute("aria-label", play.title);
      root.dataset.playing = "0";
    };
    p.toggle = function () {
      if (p.timer) return p.stop();
      if (p.cursor >= n - 1) p.go(-1);
      play.textContent = "‖ Pause"; play.title = "Pause (space)"; play.setAttribute("aria-label", play.title);
      root.dataset.playing = "1";
      p.timer = setInterval(() => (p.cursor >= n - 1 ? p.stop() : p.go(p.cursor + 1)), 900);
      active = p;
    };
    const details = root.querySelector("details.sv-inspector");
    if (details) details.addEventListener("toggle", () => details.open && p.go(p.cursor));
    root.addEventListener("click", (e) => {
      active = p;
      const chip = e.target.closest(".sv-text-slot .sv-chip[data-step]"); // a token of the text: its step
      if (chip) { p.stop(); p.go(Number(chip.dataset.step)); }
    });
    SV.players.push(p);
    p.go(view.start === undefined ? n - 1 : view.start);
    return p;
  };

  // A race: each lane's frame at time t is its last frame computed by t on its own clock.
  SV.racePlayer = function (root, view) {
    const lanes = {};
    for (const name of ["ar", "run"]) {
      lanes[name] = { times: view.lanes[name].times, frames: SV.undelta(view.lanes[name].frames) };
    }
    const end = Math.max(...Object.values(lanes).map((l) => l.times[l.times.length - 1]));
    const bar = root.querySelector(".sv-controls");
    bar.textContent = "";
    const r = { t: end, timer: null, speed: 1, root };
    const play = button(bar, "▶ Replay the race", "Replay both lanes at their recorded pace (space)", () => r.toggle());
    play.classList.add("sv-play");
    const speed = document.createElement("select");
    speed.setAttribute("aria-label", "Replay speed");
    for (const s of [1, 2, 4]) speed.add(new Option(`${s}× speed`, s));
    speed.addEventListener("change", () => { r.speed = Number(speed.value); });
    bar.appendChild(speed);
    const slider = document.createElement("input");
    slider.type = "range"; slider.min = 0; slider.max = end; slider.step = "any";
    slider.setAttribute("aria-label", "Time on the lanes' own clocks");
    slider.addEventListener("input", () => { r.stop(); r.go(Number(slider.value)); });
    bar.appendChild(slider);
    const where = document.createElement("span");
    where.className = "sv-where";
    bar.appendChild(where);
    r.go = function (t) {
      r.t = Math.max(0, Math.min(end, t));
      for (const [name, lane] of Object.entries(lanes)) {
        let i = 0;
        while (i + 1 < lane.times.length && lane.times[i + 1] <= r.t + 1e-9) i++;
        root.querySelector(`.sv-lane-${name}`).innerHTML = lane.frames[i];
      }
      const done = r.t >= end - 1e-9;
      root.querySelector(".sv-verdict-slot").innerHTML = done ? view.verdict : "";
      root.dataset.done = done ? "1" : "0";
      if (!root.dataset.drawnAt) root.dataset.drawnAt = performance.now().toFixed(1);
      slider.value = r.t;
      where.textContent = `${r.t.toFixed(1)} s of ${end.toFixed(1)} s`;
    };
    r.stop = function () {
      cancelAnimationFrame(r.timer); r.timer = null; play.textContent = "▶ Replay the race"; root.dataset.playing = "0";
    };
    r.toggle = function () {
      if (r.timer) return r.stop();
      if (r.t >= end - 1e-9) r.go(0);
      play.textContent = "‖ Pause"; root.dataset.playing = "1";
      let before = performance.now();
      const tick = (now) => {
        r.go(r.t + ((now - before) / 1000) * r.speed);
        before = now;
        if (r.t >= end - 1e-9) return r.stop();
        r.timer = requestAnimationFrame(tick);
      };
      r.timer = requestAnimationFrame(tick);
    };
    r.go(end);
    return r;
  };

  // A batch: the rows table after each shared pass.
  SV.passPlayer = function (root, view) {
    const rows = SV.undelta(view.rows);
    const slider = root.querySelector("input[type=range]");
    const where = root.querySelector(".sv-where");
    slider.min = 1; slider.max = view.passes; slider.step = 1;
    const go = (j) => {
      slider.value = j;
      root.querySelector(".sv-rows-slot").innerHTML = rows[j - 1] || "";
      where.textContent = `after pass ${j} of ${view.passes}`;
      root.dataset.pass = j;
    };
    slider.oninput = () => go(Number(slider.value));
    go(view.passes);
  };

  // -- skeletons: where a player puts each part --------------------------------------------------
  const INSPECTOR = "Inspector: p and q at one position, the draw u against min(1, p/q), the residual";
  SV.stepView = function (root, view, options) {
    const opts = options || {};
    root.classList.add("sv-stepview");
    root.innerHTML = '<div class="sv-legend-slot"></div><div class="sv-controls"></div>' +
      '<div class="sv-stats-slot"></div><div class="sv-text-slot"></div><div class="sv-panel-slot"></div>' +
      (view.tree ? '<div class="sv-tree-slot"></div>' : "") +
      (view.inspector && opts.inspector !== false
        ? `<details class="sv-inspector" open><summary>${INSPECTOR}</summary><div class="sv-inspector-slot sv-figure"></div></details>`
        : "");
    return SV.stepPlayer(root, view);
  };

  SV.raceView = function (root, view) {
    root.classList.add("sv-raceview");
    root.innerHTML = '<div class="sv-controls"></div><div class="sv-race"><div class="sv-lane-ar"></div>' +
      '<div class="sv-lane-run"></div></div><div class="sv-verdict-slot" aria-live="polite"></div>';
    return SV.racePlayer(root, view);
  };

  SV.fail = function (root, error) {
    root.innerHTML = "";
    const p = document.createElement("p");
    p.className = "sv-warn";
    p.textContent = `This view cannot be shown: ${error.message || error}.`;
    root.appendChild(p);
    console.error(error);
  };

  // -- the speedup explorer's theory: specviz.analysis.theory -----------------------------------
  SV.expectedTokens = (a, k) => (a >= 1 ? k + 1 : (1 - Math.pow(a, k + 1)) / (1 - a));
  SV.speedup = (a, k, c, v) => SV.expectedTokens(a, k) / (c * k + (v === undefined ? 1 : v));
})();
