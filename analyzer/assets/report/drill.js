(function(){var el=document.getElementById('cell-data');if(!el||typeof uPlot==='undefined')return;
var all=JSON.parse(el.textContent),cells=all.cells,edges=all.gap_edges_ms,sec=document.getElementById('drill'),charts=[];
function width(box){return Math.max(320,Math.min(box.clientWidth||600,640))}
function shade(a,b){return function(u){var c=u.ctx,x0=u.valToPos(a,'x',true),x1=u.valToPos(b,'x',true);
c.save();c.fillStyle='rgba(30,58,138,0.10)';c.fillRect(x0,u.bbox.top,x1-x0,u.bbox.height);c.restore();}}
function ticks(reqs){return function(u){var c=u.ctx,y=u.bbox.top+u.bbox.height;c.save();c.lineWidth=1;
reqs.forEach(function(r){[['sent','#6b7280',6],['first_token','#009E73',12],['end','#D55E00',8]].forEach(function(m){
var v=r[m[0]];if(v===null||v===undefined)return;var x=u.valToPos(v,'x',true);
if(x<u.bbox.left||x>u.bbox.left+u.bbox.width)return;c.strokeStyle=m[1];c.beginPath();c.moveTo(x,y);
c.lineTo(x,y-m[2]*(window.devicePixelRatio||1));c.stroke();});});c.restore();}}
function lanes(reqs){return function(u){var c=u.ctx,n=reqs.length,h=u.bbox.height/Math.max(n,1),w=Math.max(1,h*0.7),px=window.devicePixelRatio||1;c.save();
reqs.forEach(function(r,i){var y=u.valToPos(i,'y',true),a=u.valToPos(r.sent,'x',true),f=r.first_token===null?null:u.valToPos(r.first_token,'x',true),
e=u.valToPos(r.end===null?u.scales.x.max:r.end,'x',true),warm=r.role==='warmup';
c.fillStyle=warm?'#d1d5db':'#9ca3af';c.fillRect(a,y-w/2,(f===null?e:f)-a,w);
if(f!==null){c.fillStyle=warm?'#93c5fd':'#0072B2';c.fillRect(f,y-w/2,Math.max(e-f,px),w);}
if(r.end!==null){c.fillStyle='#D55E00';c.fillRect(e-px,y-w/2,2*px,w);}});c.restore();}}
function rings(marks){return function(u){var c=u.ctx,r=7*(window.devicePixelRatio||1);c.save();c.strokeStyle='#dc2626';c.lineWidth=2;
(marks||[]).forEach(function(m){var x=u.valToPos(m[0],'x',true),y=u.valToPos(m[1],'y',true);c.beginPath();c.arc(x,y,r,0,2*Math.PI);c.stroke();});c.restore();}}
function add(id,opts,data){var box=document.getElementById(id);box.innerHTML='';opts.width=width(box);opts.height=260;
charts.push(new uPlot(opts,data,box));}
function open(td){var key=td.getAttribute('data-context')+'/'+td.getAttribute('data-concurrency'),d=cells[key];if(!d)return;
charts.forEach(function(c){c.destroy()});charts=[];sec.hidden=false;
document.getElementById('drill-title').textContent=d.title;
var ul=document.getElementById('drill-notes');ul.innerHTML='';d.notes.forEach(function(n){var li=document.createElement('li');li.textContent=n;ul.appendChild(li)});
var pre=document.getElementById('drill-excerpt');pre.innerHTML='';pre.hidden=!d.loop;
if(d.loop){var lt=d.trace&&d.trace.loop_text,m=document.createElement('mark');
if(lt){pre.appendChild(document.createTextNode('\u2026'+lt[0]));m.textContent=lt[1];pre.appendChild(m);pre.appendChild(document.createTextNode(lt[2]+'\u2026'));}
else{m.textContent=d.loop.excerpt;pre.appendChild(m);}
var cap=document.createElement('div');cap.textContent='Marked: the cycle ('+d.loop.cycle_chars+' characters), repeated '+d.loop.cycles+' times.';pre.appendChild(cap);}
var t=d.trace;if(t){
add('drill-tokens',{title:'Output tokens over time (window shaded)',scales:{x:{time:false}},
axes:[{label:'s from window open'},{label:'tokens',size:64}],
series:[{label:'s'},{label:'cumulative output tokens',stroke:'#0072B2',width:2}],
hooks:{drawClear:[shade(0,t.window_s)],draw:[ticks(t.requests)]}},[t.times,t.tokens]);
var rs=t.requests.filter(function(r){return r.sent!==null}).sort(function(a,b){return a.sent-b.sent||a.request_id-b.request_id});
if(rs.length){var x0=Math.min(0,rs[0].sent),x1=Math.max.apply(null,[t.window_s].concat(rs.map(function(r){return r.end===null?t.window_s:r.end})));
add('drill-lanes',{title:'One lane per request (grey: before its first token, blue: streaming; warm-ups paler)',
scales:{x:{time:false,range:[x0,x1]},y:{range:[-0.5,rs.length-0.5]}},legend:{show:false},
axes:[{label:'s from window open'},{label:'request (by send time)',size:64,values:function(u,vs){return vs.map(function(v){return Number.isInteger(v)?String(v+1):''})}}],
series:[{label:'s'},{label:'lane',stroke:'rgba(0,0,0,0)',points:{show:false}}],
hooks:{drawClear:[shade(0,t.window_s)],draw:[lanes(rs)]}},[[x0,x1],[null,null]]);}
else{document.getElementById('drill-lanes').textContent='No requests were sent in this cell.';}
add('drill-gaps',{title:'Time between token events in the window',scales:{x:{time:false}},
axes:[{label:'ms (bin from)',values:function(u,vs){return vs.map(function(i){return edges[i]===undefined?'':String(edges[i])})}},{label:'gaps',size:64}],
series:[{label:'bin'},{label:'gaps',stroke:'#E69F00',fill:'rgba(230,159,0,0.5)',paths:uPlot.paths.bars({size:[0.8]}),points:{show:false}}]},
[edges.map(function(e,i){return i}),t.gap_counts]);
if(t.gauge_times.length){var pal=['#0072B2','#D55E00','#009E73','#CC79A7','#56B4E9','#E69F00'];
add('drill-gauges',{title:d.queued_marks.length?'Server gauges (red: the scrapes that show the queue)':'Server gauges (every scrape marked; window shaded)',scales:{x:{time:false}},
axes:[{label:'s from window open'},{label:'value',size:64}],
series:[{label:'s'}].concat(t.gauges.map(function(g,i){return{label:g[0],stroke:pal[i%pal.length],width:2,points:{show:true,size:7}}})),
hooks:{drawClear:[shade(0,t.window_s)],draw:[rings(d.queued_marks)]}},[t.gauge_times].concat(t.gauges.map(function(g){return g[1]})));}
else{document.getElementById('drill-gauges').textContent='No server gauges were scraped in this cell.';}}
sec.scrollIntoView();}
document.querySelectorAll('#matrix td.cell').forEach(function(td){td.addEventListener('click',function(){open(td)});
td.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();open(td)}})});
})();
