// The site index's filters: shows only the rows of #runs whose data-model, data-gpu
// and data-engine match the choices of the select[data-filter] elements, and how many
// rows that is in #shown. Plain ES5, no library.
(function () {
  var t = document.getElementById('runs');
  if (!t) return;
  var fs = Array.prototype.slice.call(document.querySelectorAll('select[data-filter]'));
  var out = document.getElementById('shown');
  function apply() {
    var rows = t.tBodies[0].rows, n = 0;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var ok = fs.every(function (f) {
        return f.value === '' || r.getAttribute('data-' + f.getAttribute('data-filter')) === f.value;
      });
      r.hidden = !ok;
      if (ok) n++;
    }
    out.textContent = n + ' of ' + rows.length + ' runs shown';
  }
  fs.forEach(function (f) { f.addEventListener('change', apply); });
  apply();
})();
