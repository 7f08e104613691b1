// Draw every server-built figure that is not drawn yet, also after htmx swaps.
function medbayDrawFigures(root) {
  if (!window.Plotly) { return; }
  root.querySelectorAll('script[id^="figure-data-"]').forEach(function (source) {
    var target = document.getElementById(source.id.replace("figure-data-", "figure-"));
    if (!target || target.dataset.drawn) { return; }
    var figure = JSON.parse(source.textContent);
    var layout = medbayFitLayout(figure.layout || {}, target.clientWidth, figure.data.length);
    medbayTitleAbove(target, figure.layout);
    Plotly.newPlot(target, figure.data, layout, {displaylogo: false, responsive: true});
    target.dataset.drawn = "1";
  });
}
// The title as a heading above the chart, not inside it: plotly's toolbar sits at the
// chart's top right and covered long titles, and an SVG title never wraps on a phone.
function medbayTitleAbove(target, layout) {
  var title = layout && layout.title;
  var text = title && (typeof title === "string" ? title : title.text);
  if (!text) { return; }
  var heading = document.createElement("h3");
  heading.className = "figure-title";
  // The server escaped the text for plotly, which renders entities; a heading shows text.
  heading.textContent = new DOMParser().parseFromString(text, "text/html").body.textContent;
  target.parentNode.insertBefore(heading, target);
}

// The server's layout, made to fit TARGET's width: room at the top for the toolbar only,
// and on a phone narrow side margins and the legend under the plot, with the chart
// taller by the legend's lines so the plot keeps its height.
function medbayFitLayout(layout, width, traces) {
  var fitted = Object.assign({}, layout);
  delete fitted.title;
  fitted.margin = Object.assign({}, layout.margin, {t: 30});
  if (width && width < 600) {
    fitted.margin.l = 40;
    fitted.margin.r = 10;
    fitted.legend = Object.assign({}, layout.legend, {orientation: "h", x: 0, y: -0.15, yanchor: "top"});
    fitted.height = (layout.height || 320) + 22 * Math.ceil(traces / 2);
  }
  return fitted;
}

window.addEventListener("load", function () { medbayDrawFigures(document); });
document.addEventListener("htmx:afterSettle", function (event) { medbayDrawFigures(event.target); });
