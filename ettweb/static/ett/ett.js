/* The dashboard's one script (the Content-Security-Policy allows no inline script).
 *
 * - Charts: every <script type="application/json" class="ett-figure" data-target="ID">
 *   that ettweb.pages.figures.to_fragment writes holds {data, layout, config}; it is
 *   drawn into the div ID with Plotly.newPlot (config responsive: charts follow the width).
 * - Rollout markers: charts named in <div data-rollout-clicks="ID,ID"> open the clicked
 *   marker's page (its customdata, a same-site path the server built).
 * - The report preview: an <iframe data-fit-height> takes its document's height, again
 *   whenever the mail reflows.
 * - Folded charts (the job page's rank lanes in <details>): opening one resizes the charts
 *   inside, since a browser may have laid them out at plotly's default width while closed.
 */
(function () {
  "use strict";

  function drawCharts() {
    var drawn = {};
    if (typeof window.Plotly === "undefined") { return drawn; }
    document.querySelectorAll("script.ett-figure[type='application/json']").forEach(function (block) {
      var id = block.getAttribute("data-target");
      var target = id && document.getElementById(id);
      if (!target) { return; }
      var figure = JSON.parse(block.textContent);
      drawn[id] = draw(target, figure, 0);
    });
    return drawn;
  }

  /* One chart, on its own: a chart that cannot be drawn never stops the others. On a
   * phone a horizontal legend wraps into more rows than the server planned for, leaving a
   * short chart no room to plot ("Something went wrong with axis scaling"): it is drawn
   * again taller, a few times, before giving up with a console error. */
  function draw(target, figure, tries) {
    try {
      return window.Plotly.newPlot(target, figure.data, figure.layout, figure.config);
    } catch (error) {
      if (tries >= 3 || typeof figure.layout.height !== "number") {
        console.error("chart " + target.id + " could not be drawn: " + error);
        return null;
      }
      figure.layout.height += 120;
      if (target.parentElement) { target.parentElement.style.height = figure.layout.height + "px"; }
      window.Plotly.purge(target);
      return draw(target, figure, tries + 1);
    }
  }

  function followClicks(chart) {
    if (!chart || typeof chart.on !== "function") { return; }
    chart.on("plotly_click", function (event) {
      var point = event && event.points && event.points[0];
      var url = point && point.customdata;
      if (typeof url === "string" && url.charAt(0) === "/" && url.charAt(1) !== "/") {
        window.location.assign(url);
      }
    });
  }

  function rolloutClicks(drawn) {
    document.querySelectorAll("[data-rollout-clicks]").forEach(function (holder) {
      holder.getAttribute("data-rollout-clicks").split(",").forEach(function (id) {
        id = id.trim();
        if (!drawn[id]) { return; }
        Promise.resolve(drawn[id]).then(function () { followClicks(document.getElementById(id)); });
      });
    });
  }

  function fitFrame(frame) {
    var body = frame.contentDocument && frame.contentDocument.body;
    if (!body || frame.dataset.fitted) { return; }
    frame.dataset.fitted = "1";
    var fit = function () {
      frame.style.height = body.scrollHeight + frame.offsetHeight - frame.clientHeight + "px";
    };
    fit();
    new ResizeObserver(fit).observe(body);
  }

  function fitFrames() {
    document.querySelectorAll("iframe[data-fit-height]").forEach(function (frame) {
      frame.addEventListener("load", function () { delete frame.dataset.fitted; fitFrame(frame); });
      var doc = frame.contentDocument;
      if (doc && doc.readyState === "complete" && doc.body && doc.body.childElementCount) {
        fitFrame(frame);  // loaded before this script ran
      }
    });
  }

  function resizeOnOpen() {
    document.querySelectorAll("details").forEach(function (folded) {
      folded.addEventListener("toggle", function () {
        if (!folded.open || typeof window.Plotly === "undefined") { return; }
        folded.querySelectorAll(".js-plotly-plot").forEach(function (chart) {
          window.Plotly.Plots.resize(chart);
        });
      });
    });
  }

  function start() {
    rolloutClicks(drawCharts());
    fitFrames();
    resizeOnOpen();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
