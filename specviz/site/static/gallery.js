// The gallery, the speedup explorer and the batches page: pickers that choose which recording
// the players of player.js show. The page's state is in its address (#k=KEY&vs=KEY&view=race),
// so a link or the back button opens the same view.
"use strict";
(function () {
  const SV = window.SV;
  const $ = (sel) => document.querySelector(sel);

  // -- the gallery ------------------------------------------------------------------------------
  function gallery() {
    const G = SV.gallery;
    const byKey = {};
    G.entries.forEach((e) => { byKey[e.key] = e; });
    G.presets.forEach((p) => { byKey[p.key] = Object.assign({ preset: true, prompt: "presets" }, p); });
    const form = $(".sv-picker");
    const state = () => Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
    const go = (changes) => {
      const next = Object.assign(state(), changes);
      Object.keys(next).forEach((k) => next[k] === "" && delete next[k]);
      location.hash = new URLSearchParams(next).toString();
    };
    const same = (e, prompt, t) => e.prompt === prompt && (prompt === "presets" || Number(e.temperature) === t);
    const options = (select, list, blank) => {
      select.textContent = "";
      if (blank) select.add(new Option(blank, ""));
      list.forEach((e) => select.add(new Option(e.label + (e.lossy ? " (LOSSY)" : ""), e.key)));
    };

    form.addEventListener("change", (ev) => {
      const s = state(), a = byKey[s.k] || G.entries[0];
      const prompt = form.prompt.value, t = Number(form.t.value);
      if (ev.target.name === "k") return go({ k: ev.target.value });
      if (ev.target.name === "vs") return go({ vs: ev.target.value });
      const list = prompt === "presets" ? G.presets : G.entries.filter((e) => same(e, prompt, t));
      const match = list.find((e) => e.variant === a.variant) || list[0];
      const b = byKey[s.vs];
      const pair = b && list.find((e) => e.variant === b.variant);
      go({ k: match.key, vs: pair ? pair.key : "" });
    });
    document.querySelectorAll(".sv-tabs button").forEach((b) => b.addEventListener("click", () => go({ view: b.dataset.view })));

    async function show() {
      const s = state();
      const a = byKey[s.k] || byKey["spec.code.t0"] || G.entries[0];
      const prompt = a.prompt, t = Number(a.temperature || 0);
      form.prompt.value = prompt;
      if (prompt !== "presets") form.t.value = String(t);
      $(".sv-temps").disabled = prompt === "presets";
      for (const radio of form.t) {
        radio.disabled = prompt === "presets" || !G.entries.some((e) => e.variant === a.variant && same(e, prompt, Number(radio.value)));
      }
      const list = prompt === "presets" ? G.presets : G.entries.filter((e) => same(e, prompt, t));
      options($("#sv-pick-a"), list);
      $("#sv-pick-a").value = a.key;
      options($("#sv-pick-b"), list.filter((e) => e.key !== a.key), "— nothing —");
      const b = byKey[s.vs] && byKey[s.vs].key !== a.key && same(byKey[s.vs], prompt, t) ? byKey[s.vs] : null;
      $("#sv-pick-b").value = b ? b.key : "";
      document.querySelectorAll(".sv-overview").forEach((el) => {
        el.hidden = !(el.dataset.prompt === prompt && (prompt === "presets" || Number(el.dataset.t) === t));
      });
      document.querySelectorAll(".sv-overview tr[data-key]").forEach((tr) => tr.classList.toggle("sv-current", tr.dataset.key === a.key));
      const text = prompt === "presets" ? "" : G.prompts[prompt].prompt;
      $("#sv-prompt-text").textContent = text ? `The prompt: ${text}` : "";
      const views = a.batch ? ["batch"] : ["step", "race"].concat(a.method === "ssd" ? ["timeline"] : []);
      const view = views.includes(s.view) ? s.view : views[0];
      document.querySelectorAll(".sv-tabs button").forEach((btn) => {
        btn.hidden = !views.includes(btn.dataset.view);
        btn.setAttribute("aria-selected", btn.dataset.view === view ? "true" : "false");
      });
      document.querySelectorAll(".sv-viewhelp").forEach((p) => { p.hidden = p.dataset.view !== view; });
      compare(a, b);
      SV.players.length = 0;
      document.body.dataset.view = view;
      await Promise.all([pane($("#sv-a"), a, view), pane($("#sv-b"), b, view)]);
      document.body.dataset.shown = `${a.key}|${b ? b.key : ""}|${view}`;
    }

    // two methods on the same text: their numbers in one table before the two views
    function compare(a, b) {
      const box = $("#sv-compare");
      box.textContent = "";
      if (!b || a.preset) return;
      const rows = [["τ: tokens per target pass", "tau", 2], ["α: accepted / judged", "alpha", 2],
        ["c: draft cost / target pass", "c", 2], ["target passes", "forwards", 0], ["this race's speedup", "speedup", 2]];
      const table = document.createElement("table");
      table.className = "sv-table sv-comparetable";
      const head = table.createTHead().insertRow();
      for (const text of ["side by side", a.label, b.label]) head.appendChild(document.createElement("th")).textContent = text;
      const body = table.createTBody();
      for (const [name, key, digits] of rows) {
        const row = body.insertRow();
        row.insertCell().textContent = name;
        for (const e of [a, b]) {
          const v = e[key];
          row.insertCell().textContent = v === null || v === undefined ? "—" : Number(v).toFixed(digits) + (key === "speedup" ? "×" : "");
        }
      }
      box.appendChild(table);
    }

    async function pane(root, entry, view) {
      root.textContent = "";
      root.hidden = !entry;
      if (!entry) return;
      const head = document.createElement("div");
      head.className = "sv-panehead";
      root.appendChild(head);
      const body = document.createElement("div");
      root.appendChild(body);
      try {
        const d = await SV.load(entry.key);
        head.innerHTML = "";
        const title = document.createElement("h2");
        title.textContent = entry.label + (entry.lossy ? " (LOSSY: not the target's distribution)" : "");
        const notes = document.createElement("p");
        notes.className = "sv-muted";
        notes.textContent = [entry.note, d.where + ": a replay, no model ran", d.spread, d.paced, d.earlier]
          .filter((x) => x).join(". ") + ".";
        head.append(title, notes);
        const viewRoot = document.createElement("div");
        viewRoot.dataset.key = entry.key;
        body.appendChild(viewRoot);
        const has = { step: d.step, race: d.race, timeline: d.timeline, batch: d.serving }[view];
        if (!has) {
          viewRoot.className = "sv-muted";
          viewRoot.textContent = view === "timeline" ? "Only SSD has a timeline of its own: pick SSD here, or the " +
            "Step view or Race to compare." : "This recording has no such view.";
        } else if (view === "step") SV.stepView(viewRoot, d.step);
        else if (view === "race") SV.raceView(viewRoot, d.race);
        else if (view === "timeline") { viewRoot.className = "sv-figure"; SV.plot(viewRoot, d.timeline); }
        else if (view === "batch") batch(viewRoot, d.serving);
      } catch (e) {
        SV.fail(body, e);
      }
    }

    window.addEventListener("hashchange", show);
    show();
  }

  function batch(root, view) {
    root.innerHTML = view.summary + '<div class="sv-passes"><div class="sv-controls"><input type="range" ' +
      'aria-label="Shared pass"><span class="sv-where"></span></div><div class="sv-rows-slot"></div></div>';
    SV.passPlayer(root.querySelector(".sv-passes"), view);
  }

  // -- the speedup explorer ----------------------------------------------------------------------
  function explorer() {
    const fig = SV.explorer.figure;
    const el = $("#sv-explorer");
    const inputs = ["alpha", "k", "c", "v"].map((n) => $(`#sv-${n}`));
    const theory = fig.data.map((t, i) => [i, /^theory k = (\d+)$/.exec(t.name || "")]).filter(([, m]) => m);
    const alphas = Array.from({ length: 100 }, (_, i) => i / 100);
    fig.data.push({ type: "scatter", mode: "lines", name: "your k", x: alphas, y: [],
      line: { color: "#0f172a", width: 4, dash: "dash" } });
    fig.data.push({ type: "scatter", mode: "markers", name: "your α", x: [], y: [],
      marker: { size: 16, symbol: "star", color: "#facc15", line: { color: "#0f172a", width: 2 } } });
    const draw = () => {
      const [a, k, c, v] = inputs.map((i) => Number(i.value));
      inputs.forEach((i) => { i.nextElementSibling.textContent = Number(i.value).toFixed(i.step === "1" ? 0 : 2); });
      for (const [i, m] of theory) fig.data[i].y = fig.data[i].x.map((x) => SV.speedup(x, Number(m[1]), c, v));
      const mine = fig.data[fig.data.length - 2], star = fig.data[fig.data.length - 1];
      mine.name = `your k = ${k}`;
      mine.y = alphas.map((x) => SV.speedup(x, k, c, v));
      star.x = [a]; star.y = [SV.speedup(a, k, c, v)];
      fig.layout.title = { text: `Speedup vs acceptance rate α (theory at c = ${c.toFixed(2)}, V(k + 1) = ${v.toFixed(2)})` };
      SV.plot(el, fig);
      const tau = SV.expectedTokens(a, k);
      $("#sv-readout").textContent = `α = ${a.toFixed(2)}, k = ${k}: τ = ${tau.toFixed(2)} tokens per target pass; ` +
        `cost per step c·k + V = ${(c * k + v).toFixed(2)} target passes; speedup ${SV.speedup(a, k, c, v).toFixed(2)}×` +
        (SV.speedup(a, k, c, v) < 1 ? " (slower than plain decoding)" : "");
      el.dataset.speedup = SV.speedup(a, k, c, v).toFixed(4);
    };
    inputs.forEach((i) => i.addEventListener("input", draw));
    draw();
  }

  // -- batches ------------------------------------------------------------------------------------
  function serving() {
    const pick = $("#sv-batch");
    SV.plot($("#sv-batch-figure"), SV.serving.figure);
    const show = async () => {
      try {
        const d = await SV.load(pick.value);
        $("#sv-serving").innerHTML = d.summary;
        if (d.earlier) {
          const note = document.createElement("p");
          note.className = "sv-muted";
          note.textContent = d.earlier;
          $("#sv-serving").prepend(note);
        }
        SV.passPlayer($("#sv-passes"), d);
        document.body.dataset.shown = pick.value;
      } catch (e) {
        SV.fail($("#sv-serving"), e);
      }
    };
    pick.value = pick.options[Math.min(pick.options.length - 1, 6)].value;
    pick.addEventListener("change", show);
    show();
  }

  if (SV.gallery) gallery();
  if (SV.explorer) explorer();
  if (SV.serving) serving();
})();
