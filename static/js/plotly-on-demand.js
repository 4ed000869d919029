// Plotly (4.6 MB of script) is fetched when a chart is first shown, not with the page: the service page's first
// screen (its Overview tab) draws no chart, so it no longer waits for, parses and compiles Plotly. A tab holding
// charts loads it when it is shown (service-tabs.js announces each tab it shows with a `tab-shown` event).
// `PlotlyOnDemand.whenShown(element)` resolves with Plotly once `element` is not in a hidden tab and the script has
// run; the script's address is this script tag's `data-plotly-src`. Loaded after style-nonce.js, which Plotly's
// run-time styles need under the page's Content-Security-Policy.
(function () {
  "use strict";

  const src = document.currentScript.dataset.plotlySrc;
  let loading = null;

  function load() {
    if (typeof Plotly !== "undefined") return Promise.resolve(window.Plotly);
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = src;
        script.onload = () => resolve(window.Plotly);
        script.onerror = () => {
          loading = null;  // a later tab change tries again
          script.remove();
          reject(new Error(`Plotly could not be loaded from ${src}`));
        };
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  function shown(element) {
    const panel = element.closest("[role=tabpanel]");
    return !panel || !panel.hidden;
  }

  // Plotly once `element` is shown: at once if it is, else when the tab holding it is.
  function whenShown(element) {
    if (shown(element)) return load();
    return new Promise((resolve, reject) => {
      document.addEventListener("tab-shown", function onShown() {
        if (!shown(element)) return;
        document.removeEventListener("tab-shown", onShown);
        load().then(resolve, reject);
      });
    });
  }

  window.PlotlyOnDemand = { load: load, whenShown: whenShown };
})();
