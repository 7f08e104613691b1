// Draw every server-built figure that is not drawn yet, also after htmx swaps.
function medbayDrawFigures(root) {
  if (!window.Plotly) { return; }
  root.querySelectorAll('script[id^="figure-data-"]').forEach(function (source) {
    var target = document.getElementById(source.id.replace("figure-data-", "figure-"));
    if (!target || target.dataset.drawn) { return; }
    var figure = JSON.parse(source.textContent);
    Plotly.newPlot(target, figure.data, figure.layout, {displaylogo: false, responsive: true});
    target.dataset.drawn = "1";
  });
}
window.addEventListener("load", function () { medbayDrawFigures(document); });
document.addEventListener("htmx:afterSettle", function (event) { medbayDrawFigures(event.target); });
