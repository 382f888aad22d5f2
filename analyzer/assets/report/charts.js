(function(){var el=document.getElementById('chart-data');if(!el||typeof uPlot==='undefined')return;
var d=JSON.parse(el.textContent);
var pal=['#0072B2','#E69F00','#009E73','#CC79A7','#56B4E9','#D55E00','#000000','#999999'];
var dashes=[[],[8,4],[2,3],[10,3,2,3]];
function draw(id,title,xs,lines,xlog,ylog,xlabel,ylabel){var box=document.getElementById(id);if(!box)return;
var any=lines.some(function(l){return l.values.some(function(v){return v!==null&&(!ylog||v>0)})});if(!any){box.remove();return;}
var series=[{label:xlabel}].concat(lines.map(function(l,i){return{label:l.label,stroke:pal[i%pal.length],
dash:dashes[(i+Math.floor(i/pal.length))%dashes.length],width:2,points:{show:true,size:6}}}));
var opts={title:title,width:Math.max(320,Math.min(box.clientWidth||600,640)),height:280,
scales:{x:{time:false,distr:xlog?3:1,log:2},y:{distr:ylog?3:1,log:10}},
axes:[{label:xlabel,values:function(u,vs){return vs.map(function(v){return v==null?'':v>=1024&&v%1024===0?(v/1024)+'K':String(v)})}},{label:ylabel,size:64}],series:series};
new uPlot(opts,[xs].concat(lines.map(function(l){return l.values})),box);}
var m=d.matrix;
if(m){draw('chart-total','Total tok/s',m.levels,m.total,true,false,'requests at once','tok/s');
draw('chart-per-request','Per request tok/s',m.levels,m.per_request,true,false,'requests at once','tok/s');
draw('chart-ttft','TTFT (median, log scale)',m.levels,m.ttft,true,true,'requests at once','ms');}
var p=d.prefill;
if(p){draw('chart-prefill-rate','Prefill prompt tok/s',p.contexts,[{label:'prompt tok/s',values:p.rate}],true,false,'context (tokens)','tok/s');
draw('chart-prefill-ttft','Prefill TTFT (log scale)',p.contexts,[{label:'TTFT',values:p.ttft}],true,true,'context (tokens)','ms');}
})();
