// The live transcript: one EventSource per open session page. The server sends each new
// or changed transcript entry as an HTML fragment (its element id is stable, so a call
// whose result lands replaces itself) and the inspector whenever the session moves.
(function () {
  "use strict";
  var list = document.getElementById("transcript");
  if (!list || !window.EventSource) { return; }
  var live = document.getElementById("live");
  var session = list.dataset.session;
  var cursor = list.dataset.cursor || "0";
  var url = "/s/" + encodeURIComponent(session) + "/stream?after=" + encodeURIComponent(cursor);
  var source = new EventSource(url);

  function fragment(html) {
    var t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.offsetHeight - 80;
  }

  source.addEventListener("open", function () {
    live.textContent = "live";
    live.className = "live on";
  });
  source.addEventListener("error", function () {
    live.textContent = "reconnecting…";
    live.className = "live off";
  });
  source.addEventListener("entry", function (ev) {
    var node = fragment(ev.data);
    if (!node) { return; }
    var follow = nearBottom();
    var old = document.getElementById(node.id);
    if (old) { old.replaceWith(node); } else { list.appendChild(node); }
    list.dataset.cursor = ev.lastEventId || list.dataset.cursor;
    if (follow) { window.scrollTo(0, document.body.scrollHeight); }
  });
  source.addEventListener("inspector", function (ev) {
    var aside = document.getElementById("inspector");
    // A person typing an answer keeps what they typed: the fragment is swapped in only
    // when no field of the inspector has text or focus.
    var busy = Array.prototype.some.call(aside.querySelectorAll("textarea"), function (t) {
      return t.value || t === document.activeElement;
    });
    if (!busy) { aside.innerHTML = ev.data; }
  });
})();
