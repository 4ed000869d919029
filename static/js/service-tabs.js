// The service page's tabs (templates/portal/service_detail.html), in the WAI-ARIA tabs pattern: one tab in the Tab
// order (roving tabindex), the arrow keys, Home and End move between tabs and show each (automatic activation). The
// chosen tab is the URL's `?tab=`: a click or a key pushes it to the history, so reload, links and Back/Forward show
// the same tab. Without this script the tabs are plain links to `?tab=` and the server shows the chosen one.
(function () {
  "use strict";

  function tabs() {
    return [...document.querySelectorAll("#service-tablist [role=tab]")];
  }

  function show(slug, focus) {
    const all = tabs();
    const chosen = all.find((t) => t.dataset.tab === slug) || all[0];
    for (const tab of all) {
      const selected = tab === chosen;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      document.getElementById(tab.getAttribute("aria-controls")).hidden = !selected;
    }
    if (focus) chosen.focus();
    const panel = document.getElementById(chosen.getAttribute("aria-controls"));
    // Charts drawn while their tab was hidden take the width of the tab now shown.
    if (typeof Plotly !== "undefined") {
      for (const plot of panel.querySelectorAll(".js-plotly-plot")) Plotly.Plots.resize(plot);
    }
    // Charts not drawn yet are drawn now (plotly-on-demand.js loads Plotly for the first tab that has one).
    document.dispatchEvent(new CustomEvent("tab-shown", { detail: { panel: panel } }));
    return chosen.dataset.tab;
  }

  function remember(slug) {
    const url = new URL(window.location.href);
    if (url.searchParams.get("tab") === slug) return;
    url.searchParams.set("tab", slug);
    window.history.pushState({ tab: slug }, "", url);
  }

  function start() {
    const list = document.getElementById("service-tablist");
    if (!list) return;
    list.addEventListener("click", (event) => {
      const tab = event.target.closest("[role=tab]");
      if (!tab || event.ctrlKey || event.metaKey || event.shiftKey) return;  // a new window keeps the link's way
      event.preventDefault();
      remember(show(tab.dataset.tab, true));
    });
    list.addEventListener("keydown", (event) => {
      const all = tabs();
      const at = all.indexOf(document.activeElement);
      if (at < 0) return;
      const next = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: all.length - 1 }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      remember(show(all[(next + all.length) % all.length].dataset.tab, true));
    });
    window.addEventListener("popstate", () => {
      show(new URL(window.location.href).searchParams.get("tab") || "overview", false);
    });
    // A link to a panel by its anchor alone (…/#scaling) shows the tab holding it.
    const anchored = window.location.hash && document.getElementById(window.location.hash.slice(1));
    const panel = anchored && anchored.closest("[role=tabpanel]");
    if (panel && panel.hidden && !new URL(window.location.href).searchParams.get("tab")) {
      const slug = show(panel.id.replace(/^panel-/, ""), false);
      const url = new URL(window.location.href);
      url.searchParams.set("tab", slug);
      window.history.replaceState({ tab: slug }, "", url);
      anchored.scrollIntoView();
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();
