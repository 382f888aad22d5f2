document.querySelectorAll('table.sortable').forEach(function(t){
var hs=t.tHead.rows[0].cells;
Array.prototype.forEach.call(hs,function(h,i){h.addEventListener('click',function(){
var asc=h.getAttribute('aria-sort')!=='ascending';
Array.prototype.forEach.call(hs,function(o){o.removeAttribute('aria-sort')});
h.setAttribute('aria-sort',asc?'ascending':'descending');
var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows);
rows.sort(function(x,y){var a=x.cells[i],c=y.cells[i];
var p=a.getAttribute('data-sort'),q=c.getAttribute('data-sort');var r;
if(p!==null&&q!==null&&p!==''&&q!==''){r=parseFloat(p)-parseFloat(q)}
else if(p===''||q===''){return (p===''?1:0)-(q===''?1:0)}
else{r=a.textContent.localeCompare(c.textContent)}
return asc?r:-r});rows.forEach(function(r){b.appendChild(r)})})})});
