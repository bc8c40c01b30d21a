// The overview's two charts, drawn with the vendored Chart.js from the figures the page
// embeds with json_script (#overview-data). A bar leads to the runs behind it.
(function () {
  "use strict";
  var source = document.getElementById("overview-data");
  if (!source || typeof Chart === "undefined") return;
  var data = JSON.parse(source.textContent);
  var styles = getComputedStyle(document.documentElement);
  var tones = {
    ok: "#2e9d5b", danger: "#c9372c", warn: "#d38b00", muted: "#8a97a5", info: "#3d7bd9", accent: "#7b5cc4"
  };
  var reduceMotion = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  var text = styles.getPropertyValue("--muted").trim() || "#4f5b67";
  var grid = styles.getPropertyValue("--border-soft").trim() || "#e6eaef";

  Chart.defaults.color = text;
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  Chart.defaults.animation = reduceMotion ? false : Chart.defaults.animation;

  function dayLabel(iso) {
    return window.River.time.format(iso, "day");  // a calendar day, where the reader is
  }
  var labels = data.days.map(dayLabel);

  function axes(stacked, money) {
    return {
      x: { stacked: stacked, grid: { display: false } },
      y: {
        stacked: stacked, beginAtZero: true, grid: { color: grid },
        ticks: money ? { callback: function (v) { return "$" + Number(v).toFixed(2); } } : { precision: 0 }
      }
    };
  }

  function runsFor(dayIndex, status) {
    var day = data.days[dayIndex];
    var query = "since=" + day + "&until=" + day + (status ? "&status=" + encodeURIComponent(status) : "");
    window.location.assign("/runs/?" + query);
  }

  var runsCanvas = document.getElementById("runs-chart");
  if (runsCanvas) {
    new Chart(runsCanvas, {
      type: "bar",
      data: {
        labels: labels,
        datasets: data.runs.map(function (series) {
          return { label: series.label, status: series.status, data: series.counts,
                   backgroundColor: tones[series.tone] || tones.muted, borderRadius: 3, maxBarThickness: 36 };
        })
      },
      options: {
        responsive: true, maintainAspectRatio: false, scales: axes(true, false),
        interaction: { mode: "index", intersect: false },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        onClick: function (event, elements, chart) {
          if (!elements.length) return;
          var hit = chart.getElementsAtEventForMode(event, "nearest", { intersect: true }, false)[0] || elements[0];
          runsFor(hit.index, chart.data.datasets[hit.datasetIndex].status);
        }
      }
    });
  }

  var costCanvas = document.getElementById("cost-chart");
  if (costCanvas) {
    new Chart(costCanvas, {
      type: "bar",
      data: { labels: labels, datasets: [{ label: "Cost (US$)", data: data.cost, backgroundColor: tones.info,
                                          borderRadius: 3, maxBarThickness: 36 }] },
      options: {
        responsive: true, maintainAspectRatio: false, scales: axes(false, true),
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: { label: function (item) { return "$" + Number(item.raw).toFixed(2); } } }
        },
        onClick: function (event, elements) { if (elements.length) runsFor(elements[0].index, ""); }
      }
    });
  }
})();
