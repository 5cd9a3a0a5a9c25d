// Live results: when the results feed (Server-Sent Events) reports a change, fetch this page again
// and swap its <main> for the new one. No reload: scroll position and anything else on the page stay.
// The page names the feed and the position it was built at (data-feed), so nothing published after
// it was built is missed; EventSource resumes from the last event id by itself after a disconnect.
(function () {
  "use strict";
  var feed = document.body.getAttribute("data-feed");
  var status = document.getElementById("live-status");
  if (!feed || !window.EventSource || !window.fetch) {
    if (status) status.textContent = "";
    return;
  }
  var timer = null, busy = false, again = false;
  function say(text) { if (status) status.textContent = text; }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { cache: "no-cache", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("results");
        var current = document.getElementById("results");
        if (fresh && current) current.replaceWith(document.importNode(fresh, true));
        say("live · updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("live · update failed, retrying with the next change"); })
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource(feed);
  source.addEventListener("ready", function () { say("live"); });
  source.addEventListener("tally", function () {
    clearTimeout(timer);
    timer = setTimeout(refresh, 100);
  });
  source.onerror = function () { say("reconnecting to live updates…"); };
})();
