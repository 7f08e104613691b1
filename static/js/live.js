// Live pages. The server sends two kinds of websocket message:
// - HTML fragments with hx-swap-oob (the board's tiles and counts), which htmx's
//   ws extension swaps in by id;
// - pokes, {"poke": ["events", "run-7"]}, naming the regions that changed. A
//   region is an element with data-live-region="NAME" and an hx-get of its own:
//   it fetches itself again with the page's own filters, so a new row arrives
//   in its place, a changed row changes, a row that left (or no longer matches)
//   leaves, and a page applies only what it shows.
// After a reconnect every region fetches itself once, so nothing missed while
// the socket was down is lost. #live-status says live, reconnecting or offline.
(function () {
  "use strict";
  // A region fetches itself at once when poked, then at most once per
  // MIN_GAP_MS while pokes keep coming (a burst costs a few fetches, not one
  // per change), and always once more after the last poke.
  var MIN_GAP_MS = 250;
  var OFFLINE_AFTER_FAILURES = 3;
  var pending = new Set();
  var timer = null;
  var lastFlush = 0;
  var opened = false;
  var failures = 0;

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
    }
  });

  document.addEventListener("htmx:wsOpen", function () {
    failures = 0;
    setStatus("live");
    if (opened) {
      refresh(["*"]); // catch up on what changed while the socket was down
    }
    opened = true;
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

  function reconnect(socketElement) {
    setTimeout(function () {
      var fresh = socketElement.cloneNode(true);
      socketElement.replaceWith(fresh);
      htmx.process(fresh);
    }, reconnectDelay(failures - 1));
  }

  document.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail.event ? event.detail.event.code : 0;
    failures += 1;
    if (code === 4401 || code === 4403) {
      setStatus("offline", "Live updates stopped: you are logged out or lost access. Reload the page.");
      return;
    }
    if (RECONNECT_CODES.indexOf(code) >= 0) {
      reconnect(event.target);
    }
    setStatus(failures > OFFLINE_AFTER_FAILURES ? "offline" : "reconnecting",
              "Live updates interrupted (code " + code + "); retrying.");
  });
})();
