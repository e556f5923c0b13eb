// Keyboard stepping through checkpoints (← → and j k), keeping the selected one in view,
// and remembering which JSON subtrees are folded. Everything else is plain links and htmx attributes.
(function () {
  "use strict";
  // Presses can come faster than pages: each steps on from the checkpoint the last one asked
  // for (``target``), not from the one still shown, and only one page is on its way at a time
  // (``busy``, from a request for #main until its page has settled, when htmx has made its
  // links live): then the page of the latest target is asked for, if it is not that
  // one. A page asked for while another loads would abort that one (the link's hx-sync),
  // which htmx reports as an error.
  var target = null, busy = false;
  function shownSeq() {   // the page's own checkpoint (``selected`` moves ahead with the presses)
    var shown = document.querySelector(".timeline a.cp-link[aria-current]");
    return shown ? shown.dataset.seq : null;
  }
  function go() {
    if (busy || target === null) { return; }
    var link = document.querySelector('.timeline a.cp-link[data-seq="' + target + '"]');
    if (!link) { target = null; return; }
    document.querySelectorAll(".timeline a.cp-link").forEach(function (a) { a.classList.toggle("selected", a === link); });
    link.click();
  }
  function step(delta) {
    var links = Array.prototype.slice.call(document.querySelectorAll(".timeline a.cp-link"));
    var from = target !== null ? target : shownSeq();
    var at = links.findIndex(function (a) { return a.dataset.seq === from; });
    var next = links[at + delta];
    if (at < 0 || !next) { return; }
    target = next.dataset.seq;
    links.forEach(function (a) { a.classList.toggle("selected", a === next); });
    go();
  }
  function forMain(e) {   // a request for the checkpoint's page (htmx reports it on #main once swapped)
    var to = e.detail && e.detail.target;
    return !!(to && to.id === "main");
  }
  document.addEventListener("htmx:beforeRequest", function (e) { if (forMain(e)) { busy = true; } });
  document.addEventListener("htmx:afterRequest", function (e) {
    if (forMain(e) && !e.detail.successful) { busy = false; target = null; }   // failed: stop there
  });
  document.addEventListener("htmx:afterSettle", function (e) {
    if (!forMain(e) || !e.target || e.target.id !== "main") { return; }   // once, not per out-of-band part
    busy = false;
    if (shownSeq() === target) { target = null; } else { go(); }
  });
  document.addEventListener("click", function (e) {   // a person's own click: on from there
    var link = e.isTrusted && e.target && e.target.closest ? e.target.closest(".timeline a.cp-link") : null;
    if (link) { target = link.dataset.seq; }
  }, true);
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) { return; }
    if (e.altKey || e.ctrlKey || e.metaKey) { return; }
    if (e.key === "ArrowLeft" || e.key === "k") { step(-1); e.preventDefault(); }
    if (e.key === "ArrowRight" || e.key === "j") { step(1); e.preventDefault(); }
  });
  // A fold is remembered for one tree of one page (every tree's root is "$": a fold of one
  // question's payload must not fold the state of every run), while stepping through its
  // checkpoints, and for this tab only.
  var KEY = "harness.folded";
  function folded() { try { return JSON.parse(sessionStorage.getItem(KEY) || "{}"); } catch (err) { return {}; } }
  function where(d) {
    var box = d.parentElement && d.parentElement.closest("[id]");
    return window.location.pathname + "#" + (box ? box.id : "") + ":" + d.dataset.path;
  }
  // So is a panel opened or closed (the effect journal, say) on one run's page: a live refresh
  // or a step swaps the panels in again, and a lazy one opened again loads at the new checkpoint
  // (a live refresh keeps one whose content cannot have changed as it is: run.html, hx-preserve).
  function panelKey(d) { return window.location.pathname + "#panel:" + d.dataset.panel; }
  document.addEventListener("toggle", function (e) {
    var d = e.target, key = null;
    if (d.classList && d.classList.contains("j")) { key = where(d); }
    if (d.classList && d.classList.contains("panel") && d.dataset.panel) { key = panelKey(d); }
    if (key === null) { return; }
    var f = folded(); f[key] = d.open ? 1 : 0;
    try { sessionStorage.setItem(KEY, JSON.stringify(f)); } catch (err) { /* full: folds are a convenience */ }
  }, true);
  function apply(d, was) { if (was === 1) { d.open = true; } else if (was === 0) { d.open = false; } }
  function restore(root) {   // as the new content comes in, before its own toggle events
    var f = folded();
    root.querySelectorAll("details.j[data-path]").forEach(function (d) { apply(d, f[where(d)]); });
    root.querySelectorAll("details.panel[data-panel]").forEach(function (d) { apply(d, f[panelKey(d)]); });
  }
  // A lazy panel opened by ``restore`` may have toggled before htmx made it live: asked to
  // load once htmx has (its trigger is "toggle once": never loaded twice).
  document.addEventListener("htmx:load", function (e) {
    var root = e.target, sel = "details.panel.lazy[open]";
    var found = Array.prototype.slice.call(root.querySelectorAll ? root.querySelectorAll(sel) : []);
    if (root.matches && root.matches(sel)) { found.push(root); }
    found.forEach(function (d) { if (d.id !== "events") { htmx.trigger(d, "toggle"); } });
  });
  // A node clicked in the graph drawing opens at the checkpoint picked: the drawing is laid
  // out once per graph version and stays put while htmx swaps the checkpoint below it. A page
  // that picked none follows the head of a run going on, and goes on following it.
  document.addEventListener("click", function (e) {
    var a = e.target && e.target.closest ? e.target.closest("#dag a") : null;
    var sel = document.querySelector(".timeline a.cp-link.selected");
    if (!a || !sel || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) { return; }
    var href = a.getAttribute("href") || a.getAttribute("xlink:href");
    if (!href) { return; }
    var url = new URL(href, window.location.href);
    if (new URLSearchParams(window.location.search).has("cp")) { url.searchParams.set("cp", sel.dataset.seq); }
    e.preventDefault();
    window.location.assign(url.toString());
  });
  // A running run's page refreshes on each checkpoint: a checkpoint (or node) picked in the
  // timeline stays shown, with the URL that names it; a page that picked none follows the head.
  document.addEventListener("htmx:configRequest", function (e) {
    var elt = e.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-refresh")) {
      e.detail.path = window.location.pathname + window.location.search;
    }
    // The trace follows the run only once opened, at the page and search it shows.
    if (elt && elt.hasAttribute && elt.hasAttribute("data-trace")) {
      var shown = document.querySelector("#events[open] table.events[data-src]");
      if (!shown) { e.preventDefault(); return; }
      e.detail.path = atShown(shown.getAttribute("data-src"));
    }
    // The trace is kept through swaps of the page (hx-preserve): it is read at the checkpoint shown now.
    if (elt && elt.id === "events") { e.detail.path = atShown(e.detail.path); }
  });
  // A refresh asked for at one address and answered after the page moved on (a node's drawer
  // closed, a checkpoint picked) would put back what was just left: it is asked for again at
  // the address shown now instead.
  document.addEventListener("htmx:beforeSwap", function (e) {
    var cfg = e.detail.requestConfig, elt = cfg && cfg.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-refresh")) { return; }
    if (cfg.path === window.location.pathname + window.location.search) { return; }
    e.detail.shouldSwap = false;
    htmx.trigger(document.body, "run-changed");
  });
  function atShown(path) {   // ``path`` with the checkpoint shown as its ``cp``
    var seq = shownSeq(), url = new URL(path, window.location.href);
    if (seq !== null) { url.searchParams.set("cp", seq); }
    return url.pathname + url.search;
  }
  // A step (or a refresh following the head) to another checkpoint reads the kept trace again
  // there: which of its events came after the checkpoint depends on it.
  document.addEventListener("htmx:afterSettle", function (e) {
    if (!e.target || e.target.id !== "main") { return; }
    var table = document.querySelector("#events[open] table.events[data-src]");
    if (!table) { return; }
    var src = table.getAttribute("data-src");
    if (atShown(src) !== new URL(src, window.location.href).pathname + new URL(src, window.location.href).search) {
      htmx.ajax("GET", atShown(src), {target: "#events .panel-body", swap: "innerHTML"});
    }
  });
  // A running run's time so far goes on between refreshes: counted here from what the server
  // last said (no clock of this machine is compared with the server's). A page of a run that
  // ended or paused has no data-took, so the count stops with the refresh that says so.
  function duration(s) {   // as the server writes it (render.py _fmt_duration)
    if (s < 1) { return Math.round(s * 1000) + " ms"; }
    if (s < 120) { return s.toFixed(1) + " s"; }
    return (s / 60).toFixed(1) + " min";
  }
  function stamp() {   // when the server's figure arrived: the count goes on from there
    var took = document.querySelector("#run-took[data-took]:not([data-since])");
    if (took) { took.dataset.since = String(Date.now()); }
  }
  window.setInterval(function () {
    stamp();
    var took = document.querySelector("#run-took[data-took]");
    if (!took) { return; }
    var s = parseFloat(took.dataset.took) + (Date.now() - parseFloat(took.dataset.since)) / 1000;
    took.textContent = duration(s);
  }, 500);
  // The timeline is a scrolled box: bring the selected checkpoint into it, moving the box
  // only (scrollIntoView would scroll the page too, away from the panels being stepped).
  function reveal() {
    var box = document.querySelector(".timeline ol");
    var sel = box && box.querySelector("a.cp-link.selected");
    if (!sel) { return; }
    var item = sel.parentElement || sel;
    var top = item.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop;
    if (top < box.scrollTop) { box.scrollTop = top; }
    else if (top + item.offsetHeight > box.scrollTop + box.clientHeight) {
      box.scrollTop = top + item.offsetHeight - box.clientHeight;
    }
  }
  // The server puts the message of a refused request in #flash itself; a failure it could not
  // explain (a 5xx, no answer at all) would otherwise leave the click without any visible effect.
  function flash(text) {
    var box = document.getElementById("flash");
    if (!box) { return; }
    var p = document.createElement("p");
    p.className = "error";
    p.textContent = text;
    box.replaceChildren(p);
  }
  document.addEventListener("htmx:responseError", function (e) {
    var status = e.detail.xhr ? e.detail.xhr.status : 0;
    flash("The server could not do that (HTTP " + status + "); reload the page to see where things are.");
  });
  document.addEventListener("htmx:sendError", function () {
    flash("The server did not answer: is it still running? Reload the page once it is.");
  });
  // A checkpoint chosen from the keyboard (Tab to it, Enter) is swapped for a new link: focus
  // goes on from the one now selected, not from the top of the page.
  var focusSelected = false;
  document.addEventListener("htmx:beforeRequest", function (e) {
    focusSelected = !!(e.detail.elt && e.detail.elt.classList && e.detail.elt.classList.contains("cp-link")
                       && document.activeElement === e.detail.elt);
  });
  document.addEventListener("DOMContentLoaded", function () { stamp(); restore(document); reveal(); });
  document.addEventListener("htmx:afterSwap", function (e) {
    stamp(); restore(e.target); reveal();
    var sel = focusSelected && document.querySelector(".timeline a.cp-link.selected");
    if (sel && (document.activeElement === document.body || !document.activeElement)) { sel.focus({preventScroll: true}); }
    focusSelected = false;
  });
  document.addEventListener("htmx:historyRestore", reveal);
})();
