// Live pages. The server sends three kinds of websocket message:
// - HTML fragments with hx-swap-oob (the board's tiles), which htmx's ws
//   extension swaps in by id;
// - pushes, {"push": "events", "url": ..., "version": 7, "html": ...}: a
//   region rendered again by the server, as this user, at the address the
//   page last fetched it from (the page tells its socket those addresses:
//   {"watch": [[region, url, element id], ...]});
// - pokes, {"poke": ["events", "run-7"]}, naming the regions that changed
//   and that the server does not push. A region is an element with
//   data-live-region="NAME" and an hx-get of its own: it fetches itself again
//   with the page's own filters.
// Either way a new row arrives in its place, a changed row changes, a row that
// left (or no longer matches) leaves, and a page applies only what it shows;
// a rendering older than the one shown (X-Live-Version) is never swapped in.
// A push is morphed into the region (idiomorph: rows matched by id), so a
// change touches only the rows that changed, and a burst of pushes is applied
// at most once per PUSH_GAP_MS, as its newest rendering.
// After every (re)connect each region fetches itself once, so nothing missed
// while the socket was down is lost. #live-status says live, reconnecting,
// polling or offline: a socket closed with 4429 (its person has too many open,
// MEDBAY_SOCKETS_PER_USER) leaves the page fetching its regions every POLL_MS,
// and trying its socket again every few minutes.
(function () {
  "use strict";
  // A region fetches itself at once when poked, then at most once per
  // MIN_GAP_MS while pokes keep coming (a burst costs a few fetches, not one
  // per change), and always once more after the last poke.
  var MIN_GAP_MS = 250;
  var PUSH_GAP_MS = 100;
  var OFFLINE_AFTER_FAILURES = 3;
  var TOO_MANY = 4429;
  var POLL_MS = 10000;
  var RETRY_LIVE_MS = 120000;
  var poller = null;
  var pending = new Set();
  var timer = null;
  var lastFlush = 0;
  var failures = 0;
  var socket = null; // the ws extension's socket wrapper, while open
  var watched = {}; // region -> [region, url, element id] it last fetched itself with
  var shown = {}; // region -> the newest version on the page

  function regions() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-live-region]"));
  }

  function refresh(names) {
    names.forEach(function (name) { pending.add(name); });
    if (timer !== null) {
      return;
    }
    var wait = lastFlush + MIN_GAP_MS - Date.now();
    if (wait <= 0) {
      flush();
    } else {
      timer = setTimeout(flush, wait);
    }
  }

  function flush() {
    timer = null;
    lastFlush = Date.now();
    var all = pending.has("*");
    regions().forEach(function (region) {
      if (all || pending.has(region.dataset.liveRegion)) {
        htmx.trigger(region, "medbay:refresh");
      }
    });
    pending.clear();
  }

  function setStatus(state, detail) {
    var status = document.getElementById("live-status");
    if (status) {
      status.textContent = state;
      status.className = "live-status live-" + state;
      status.title = detail || "Live updates: " + state;
    }
    var banner = document.getElementById("live-banner");
    if (banner) {
      banner.hidden = state !== "offline";
    }
  }

  function regionNamed(name) {
    return regions().filter(function (region) {
      return region.dataset.liveRegion === name;
    })[0];
  }

  function sendWatch() {
    if (socket !== null) {
      var entries = Object.keys(watched).map(function (name) { return watched[name]; });
      socket.send(JSON.stringify({watch: entries}));
    }
  }

  // A region's fetch (poked, or a filter changed) says where it comes from.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var region = event.detail.target;
    if (!region || !region.dataset || !region.dataset.liveRegion || !region.id) {
      return;
    }
    var name = region.dataset.liveRegion;
    var url = event.detail.pathInfo.finalRequestPath;
    if (!watched[name] || watched[name][1] !== url) {
      watched[name] = [name, url, region.id];
      sendWatch();
    }
  });

  // Older than what the page shows (a fetch overtaken by a push): not swapped in.
  function isStale(name, version) {
    if (version === null || isNaN(version)) {
      return false;
    }
    if (shown[name] !== undefined && version < shown[name]) {
      return true;
    }
    shown[name] = version;
    return false;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var region = event.detail.target;
    if (!region || !region.dataset || !region.dataset.liveRegion) {
      return;
    }
    var header = event.detail.xhr.getResponseHeader("X-Live-Version");
    if (header !== null && isStale(region.dataset.liveRegion, parseInt(header, 10))) {
      event.detail.shouldSwap = false;
    }
  });

  var pushes = {}; // region -> the newest push not yet applied
  var pushTimer = null;
  var lastPush = 0;

  function queuePush(message) {
    pushes[message.push] = message;
    if (pushTimer === null) {
      pushTimer = setTimeout(applyPushes, Math.max(0, lastPush + PUSH_GAP_MS - Date.now()));
    }
  }

  function applyPushes() {
    pushTimer = null;
    lastPush = Date.now();
    var waiting = pushes;
    pushes = {};
    Object.keys(waiting).forEach(function (name) { applyPush(waiting[name]); });
  }

  function applyPush(message) {
    var name = message.push;
    var region = regionNamed(name);
    if (!region || !watched[name] || watched[name][1] !== message.url) {
      refresh([name]); // rendered for an address this page no longer shows
      return;
    }
    var version = typeof message.version === "number" ? message.version : null;
    if (isStale(name, version)) {
      return;
    }
    var style = region.getAttribute("hx-swap") === "outerHTML" ? "outerHTML" : "innerHTML";
    Idiomorph.morph(region, message.html, {morphStyle: style});
    htmx.process(regionNamed(name) || document.body);
  }

  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var text = event.detail.message;
    if (typeof text !== "string" || text.charAt(0) !== "{") {
      return; // an HTML fragment: the ws extension swaps it
    }
    event.preventDefault();
    var message;
    try {
      message = JSON.parse(text);
    } catch (error) {
      return;
    }
    if (Array.isArray(message.poke)) {
      refresh(message.poke);
    } else if (typeof message.push === "string" && typeof message.html === "string") {
      queuePush(message);
    }
  });

  function startPolling(socketElement) {
    setStatus("polling", "Too many of your pages are live at once: this one refreshes " +
              "every " + POLL_MS / 1000 + " s instead. Close some to make it live again.");
    if (poller === null) {
      poller = setInterval(function () { refresh(["*"]); }, POLL_MS);
    }
    setTimeout(function () { connectAgain(socketElement); },
               RETRY_LIVE_MS * (1 + Math.random()));
  }

  function stopPolling() {
    if (poller !== null) {
      clearInterval(poller);
      poller = null;
    }
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    failures = 0;
    stopPolling();
    socket = event.detail.socketWrapper;
    setStatus("live");
    // Catch up on what changed before the socket opened or while it was down;
    // the fetches also tell the new socket where each region comes from.
    watched = {};
    refresh(["*"]);
  });

  // The ws extension reconnects by itself after 1006/1011/1012/1013, but a
  // server may send only 1000 or 3000-4999: Medbay's "restarting" (4012) and
  // "try again later" (4013) are reconnected here, by connecting a fresh copy
  // of the socket element.
  var RECONNECT_CODES = [4012, 4013];

  function reconnectDelay(retry) {
    var delay = htmx.config.wsReconnectDelay;
    if (typeof delay === "function") {
      return delay(retry);
    }
    return 1000 * Math.pow(2, Math.min(retry, 5)) * Math.random();
  }

  function connectAgain(socketElement) {
    var fresh = socketElement.cloneNode(true);
    socketElement.replaceWith(fresh);
    htmx.process(fresh);
  }

  function reconnect(socketElement) {
    setTimeout(function () { connectAgain(socketElement); }, reconnectDelay(failures - 1));
  }

  document.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail.event ? event.detail.event.code : 0;
    socket = null;
    failures += 1;
    if (code === 4401 || code === 4403) {
      stopPolling();
      setStatus("offline", "Live updates stopped: you are logged out or lost access. Reload the page.");
      return;
    }
    if (code === TOO_MANY) {
      startPolling(event.target);
      return;
    }
    if (RECONNECT_CODES.indexOf(code) >= 0) {
      reconnect(event.target);
    }
    setStatus(failures > OFFLINE_AFTER_FAILURES ? "offline" : "reconnecting",
              "Live updates interrupted (code " + code + "); retrying.");
  });
})();
