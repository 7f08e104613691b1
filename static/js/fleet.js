// The fleet view (clusters/canvas.py): every GPU of a large cluster drawn on one
// canvas per partition of each cluster from a compact payload, {"groups": [{"name",
// "cluster", "nodes": [names], "gpus": ["hhhhfhhh", ...]}]}, one letter per GPU. The
// live socket (topic "fleet") sends {"fleet": [[cluster, name, letters], ...]} for
// the nodes that changed; each is painted in place, without a fetch. A node is
// known by its cluster and name: on a fleet of all clusters two clusters may each
// have a gpu-01, and neither may be painted with the other's letters. After each (re)connect the
// payload is fetched again, so nothing missed while the socket was down stays
// missed; deltas that arrive while a fetch is in flight are applied again on top
// of it (each carries a node's whole state, so applying one twice is harmless).
// A node is a block of 4 x 2 squares; pointing at it names it in #fleet-tip,
// clicking opens its page. Keyboard and screen-reader users have the table of
// nodes that are not healthy below the canvas (#fleet-problems).
(function () {
  "use strict";
  var CELL = 3;
  var PER_LINE = 4; // GPUs per line of a node's block
  var GAP = 2;
  var COLOURS = {h: "#2e9e5b", d: "#e0a030", f: "#d63b3b", r: "#8854d0", o: "#9aa1ad"};
  var NAMES = {h: "healthy", d: "degraded", f: "failed", r: "in remediation", o: "out of service"};
  var root = null;
  var groups = []; // {name, cluster, nodes, gpus, canvas, perRow, blockW, blockH}
  var where = {}; // key(cluster, node name) -> [group, position]
  var several = false; // whether the groups are of more than one cluster
  var loading = null; // deltas received while a fetch is in flight, or null
  var generation = 0;

  function key(cluster, name) {
    return cluster + "/" + name; // a cluster's name never holds a "/"
  }

  function blockSize(gpuCount) {
    var lines = Math.max(1, Math.ceil(gpuCount / PER_LINE));
    return [PER_LINE * CELL + GAP, lines * CELL + GAP];
  }

  function paintNode(group, position) {
    var context = group.canvas.getContext("2d");
    var letters = group.gpus[position];
    var x = (position % group.perRow) * group.blockW;
    var y = Math.floor(position / group.perRow) * group.blockH;
    context.clearRect(x, y, group.blockW, group.blockH);
    if (/^h*$/.test(letters) && letters.length % PER_LINE === 0) {
      context.fillStyle = COLOURS.h; // most nodes: one rectangle, not eight
      context.fillRect(x, y, PER_LINE * CELL, (letters.length / PER_LINE) * CELL);
      return;
    }
    for (var g = 0; g < letters.length; g++) {
      context.fillStyle = COLOURS[letters.charAt(g)] || COLOURS.o;
      context.fillRect(x + (g % PER_LINE) * CELL, y + Math.floor(g / PER_LINE) * CELL, CELL, CELL);
    }
  }

  function drawGroup(group) {
    var width = Math.max(200, group.canvas.parentNode.clientWidth);
    var widest = group.gpus.reduce(function (most, letters) { return Math.max(most, letters.length); }, 0);
    var size = blockSize(widest);
    group.blockW = size[0];
    group.blockH = size[1];
    group.perRow = Math.max(1, Math.floor(width / group.blockW));
    group.canvas.width = group.perRow * group.blockW;
    group.canvas.height = Math.max(1, Math.ceil(group.nodes.length / group.perRow)) * group.blockH;
    for (var i = 0; i < group.nodes.length; i++) {
      paintNode(group, i);
    }
  }

  function groupElement(group) {
    var section = document.createElement("section");
    section.className = "fleet-group";
    var heading = document.createElement("h3");
    var link = document.createElement("a");
    var named = several ? group.name + " on " + group.cluster : group.name;
    link.href = root.dataset.boardUrl + "?partition=" + encodeURIComponent(group.name) +
      (several ? "&cluster=" + encodeURIComponent(group.cluster) : "");
    link.textContent = named;
    link.title = "Show only partition " + named;
    heading.appendChild(link);
    heading.appendChild(document.createTextNode(" " + group.nodes.length + " nodes"));
    var canvas = document.createElement("canvas");
    canvas.className = "fleet-canvas";
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "GPUs of partition " + named + "; the table below lists the nodes that are not healthy");
    canvas.dataset.group = group.name;
    canvas.dataset.cluster = group.cluster;
    section.appendChild(heading);
    section.appendChild(canvas);
    group.canvas = canvas;
    canvas.addEventListener("mousemove", function (event) { point(group, event); });
    canvas.addEventListener("mouseleave", function () { tip(""); });
    canvas.addEventListener("click", function (event) {
      var position = positionAt(group, event);
      if (position !== null) {
        window.location.href = nodeUrl(group.cluster, group.nodes[position]);
      }
    });
    return section;
  }

  function nodeUrl(cluster, name) {
    // The node's cluster address. CLUSTER first: a cluster's name is lower case, so
    // it cannot hold "NODE", while a node's name might hold "CLUSTER".
    return root.dataset.nodeUrl
      .replace("CLUSTER", encodeURIComponent(cluster))
      .replace("NODE", encodeURIComponent(name));
  }

  function positionAt(group, event) {
    var box = group.canvas.getBoundingClientRect();
    var column = Math.floor((event.clientX - box.left) / group.blockW);
    var row = Math.floor((event.clientY - box.top) / group.blockH);
    var position = row * group.perRow + column;
    if (column < 0 || column >= group.perRow || row < 0 || position >= group.nodes.length) {
      return null;
    }
    return position;
  }

  function describe(group, position) {
    var letters = group.gpus[position];
    var bad = [];
    for (var g = 0; g < letters.length; g++) {
      if (letters.charAt(g) !== "h") {
        bad.push("GPU " + g + " " + (NAMES[letters.charAt(g)] || "unknown"));
      }
    }
    var named = several ? group.nodes[position] + " on " + group.cluster : group.nodes[position];
    return named + ": " + (bad.length ? bad.join(", ") : letters.length + " GPUs healthy");
  }

  function point(group, event) {
    var position = positionAt(group, event);
    group.canvas.classList.toggle("fleet-pointing", position !== null);
    tip(position === null ? "" : describe(group, position));
  }

  function tip(text) {
    var element = document.getElementById("fleet-tip");
    if (element && element.textContent !== text) {
      element.textContent = text;
    }
  }

  function show(payload) {
    var container = document.getElementById("fleet-groups");
    container.textContent = "";
    groups = payload.groups;
    where = {};
    several = groups.some(function (group) { return group.cluster !== groups[0].cluster; });
    groups.forEach(function (group) {
      container.appendChild(groupElement(group));
      group.nodes.forEach(function (name, position) {
        where[key(group.cluster, name)] = [group, position];
      });
    });
    groups.forEach(drawGroup);
    root.dataset.drawn = String(generation);
    document.dispatchEvent(new CustomEvent("medbay:fleet-drawn"));
  }

  function load() {
    generation += 1;
    var mine = generation;
    loading = loading || [];
    fetch(root.dataset.source, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (response) {
        if (!response.ok) {
          throw new Error("fleet payload: HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (payload) {
        var newest = mine === generation;
        if (!newest && root.dataset.drawn) {
          return; // a newer fetch is on its way and something is shown meanwhile
        }
        // An older payload is still drawn when nothing is shown yet (the page's first
        // fetch, overtaken by the socket's): the newer one follows.
        show(payload);
        (loading || []).forEach(apply);
        if (newest) {
          loading = null;
        }
      })
      .catch(function (error) {
        loading = null;
        var status = document.getElementById("fleet-loading");
        if (status) {
          status.textContent = "The fleet could not be loaded (" + error.message + "); it is tried again when the live connection comes back.";
        }
      });
  }

  function apply(changes) {
    var painted = [];
    changes.forEach(function (change) {
      var found = where[key(change[0], change[1])];
      if (found && found[0].gpus[found[1]] !== change[2]) {
        found[0].gpus[found[1]] = change[2];
        paintNode(found[0], found[1]);
        painted.push(change[1]);
      }
    });
    if (painted.length) {
      document.dispatchEvent(new CustomEvent("medbay:fleet-applied", {detail: {nodes: painted}}));
    }
  }

  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var text = event.detail.message;
    if (typeof text !== "string" || text.indexOf('{"fleet":') !== 0) {
      return;
    }
    event.preventDefault();
    var changes;
    try {
      changes = JSON.parse(text).fleet;
    } catch (error) {
      return;
    }
    if (loading !== null) {
      loading.push(changes);
    }
    apply(changes);
  });

  document.addEventListener("htmx:wsOpen", function () {
    if (root) {
      load(); // what changed before the socket opened, or while it was down
    }
  });

  // Where a GPU is drawn, for tests and benchmarks that look at the pixels: of node
  // NAME on CLUSTER, or without CLUSTER on the first cluster drawn that has it.
  window.MedbayFleet = {
    locate: function (name, gpu, cluster) {
      var found = null;
      if (cluster !== undefined) {
        found = where[key(cluster, name)];
      } else {
        groups.some(function (group) { found = where[key(group.cluster, name)]; return !!found; });
      }
      if (!found) {
        return null;
      }
      var group = found[0];
      var position = found[1];
      return {
        group: group.name,
        cluster: group.cluster,
        x: (position % group.perRow) * group.blockW + (gpu % PER_LINE) * CELL + 1,
        y: Math.floor(position / group.perRow) * group.blockH + Math.floor(gpu / PER_LINE) * CELL + 1
      };
    }
  };

  document.addEventListener("DOMContentLoaded", function () {
    root = document.getElementById("fleet");
    if (!root) {
      return;
    }
    var form = document.querySelector("form[data-auto-submit]");
    if (form) {
      form.addEventListener("change", function () { form.submit(); });
    }
    load();
    var resized = null;
    window.addEventListener("resize", function () {
      clearTimeout(resized);
      resized = setTimeout(function () { groups.forEach(drawGroup); }, 150);
    });
  });
})();
