"""Knowledge distillation student with a learnable softmax temperature kept in float64."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Student(nn.Module):
    def __init__(self, d_in=20, classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, classes))
        # float64 for a numerically stable temperature
        self.temperature = nn.Parameter(torch.tensor(2.0)).double()

    def forward(self, x):
        return self.body(x) / self.temperature.float()


def distill_loss(student_logits, teacher_logits, labels, alpha=0.5):
    soft = F.kl_div(F.log_softmax(student_logits, -1), F.softmax(teacher_logits, -1), reduction="batchmean")
    return alpha * soft + (1 - alpha) * F.cross_entropy(student_logits, labels)


torch.manual_seed(0)
teacher_w = torch.randn(20, 4)
student = Student()
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(16, 20)
    t_logits = x @ teacher_w
    loss = distill_loss(student(x), t_logits, t_logits.argmax(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
