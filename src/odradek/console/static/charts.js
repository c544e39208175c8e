// Draws every <div class="chart" data-src=URL data-field=NAME> with Plotly from the console's
// JSON ({series: {name: {t: [epoch s], NAME: [values]}}, error}), and redraws it every
// data-refresh milliseconds (the console's sampling interval, at least one second).
(function () {
  "use strict";
  async function draw(el) {
    let data;
    try {
      const response = await fetch(el.dataset.src, {cache: "no-store"});
      data = await response.json();
    } catch (e) {
      return;  // the console went away; keep the last picture
    }
    const field = el.dataset.field;
    const traces = Object.keys(data.series).sort().map(function (name) {
      const s = data.series[name];
      return {x: s.t.map(function (t) { return new Date(t * 1000); }), y: s[field],
              name: name, type: "scatter", mode: "lines+markers"};
    });
    const layout = {
      margin: {l: 60, r: 20, t: 20, b: 40}, height: 320, showlegend: true,
      xaxis: {type: "date", visible: traces.length > 0},
      yaxis: {title: {text: el.dataset.ytitle}, rangemode: "tozero"},
      annotations: traces.length ? [] : [{
        text: "no samples yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
      }],
    };
    Plotly.react(el, traces, layout, {displaylogo: false, responsive: true});
    el.dataset.points = String(traces.reduce(function (n, t) { return n + t.x.length; }, 0));
    const error = document.getElementById("chart-error");
    if (error) {
      error.hidden = !data.error;
      error.textContent = data.error ? "sampling failed: " + data.error : "";
    }
  }
  document.querySelectorAll(".chart").forEach(function (el) {
    draw(el);
    setInterval(function () { draw(el); }, Math.max(1000, Number(el.dataset.refresh) || 5000));
  });
})();
